package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/t1flow/t1flow/internal/config"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

func tasksValidate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tasks validate", flag.ContinueOnError)
	dirs, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(dirs) == 0 {
		return badInput(errors.New("tasks validate: name at least one task directory"))
	}
	ts, err := loadTasks(dirs, stderr)
	if err != nil {
		return err
	}
	for _, t := range ts {
		fmt.Fprintf(stdout, "ok  %s  %s\n", t.ID, t.Name)
	}
	return nil
}

func tasksImport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tasks import", flag.ContinueOnError)
	pool := fs.String("pool", "", "pool name")
	storeDir := fs.String("store", config.StoreDir(), "artifact store directory")
	dirs, err := parse(fs, args)
	if err != nil {
		return err
	}
	if *pool == "" || len(dirs) == 0 {
		return badInput(errors.New("usage: starter tasks import DIR... --pool NAME"))
	}
	if err := task.ValidatePoolName(*pool); err != nil {
		return badInput(err)
	}
	ts, err := loadTasks(dirs, stderr)
	if err != nil {
		return err
	}
	st, err := openStore(*storeDir)
	if err != nil {
		return err
	}
	p, added, err := task.Import(ctx, st, *pool, ts)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "pool %s: %d tasks (%d new)\n", p.Name, len(p.Tasks), added)
	return nil
}

func tasksList(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("tasks list", flag.ContinueOnError)
	pool := fs.String("pool", "", "pool name")
	storeDir := fs.String("store", config.StoreDir(), "artifact store directory")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *pool == "" {
		return badInput(errors.New("usage: starter tasks list --pool NAME"))
	}
	st, err := openStore(*storeDir)
	if err != nil {
		return err
	}
	p, err := task.LoadPool(ctx, st, *pool)
	if errors.Is(err, store.ErrNotFound) {
		return badInput(fmt.Errorf("pool %q does not exist (import tasks with: starter tasks import DIR --pool %s)", *pool, *pool))
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(p)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tCATEGORY\tDIFFICULTY")
	for _, t := range p.Tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Category, t.Difficulty)
	}
	return tw.Flush()
}

// loadTasks validates every directory and returns all problems at once.
func loadTasks(dirs []string, stderr io.Writer) ([]*task.Task, error) {
	var all []*task.Task
	var errs []string
	for _, d := range dirs {
		ts, err := task.LoadAll(d)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		all = append(all, ts...)
	}
	if len(errs) > 0 {
		return nil, badInput(fmt.Errorf("invalid tasks, nothing was started:\n%s", strings.Join(errs, "\n")))
	}
	for _, t := range all {
		for _, w := range t.Warnings {
			fmt.Fprintln(stderr, "warning:", w)
		}
	}
	return all, nil
}

// bundleDir validates and stores the tasks of a directory.
func bundleDir(ctx context.Context, st store.Store, dir string, stderr io.Writer) ([]task.Ref, error) {
	ts, err := loadTasks([]string{dir}, stderr)
	if err != nil {
		return nil, err
	}
	var refs []task.Ref
	for _, t := range ts {
		r, err := task.Bundle(ctx, st, t)
		if err != nil {
			return nil, err
		}
		refs = append(refs, r)
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].Name < refs[j].Name })
	return refs, nil
}

// poolOrDir is the tasks a command names by --pool or --tasks (none when
// it names neither).
func poolOrDir(ctx context.Context, st store.Store, pool, dir, what string, stderr io.Writer) ([]task.Ref, error) {
	switch {
	case pool != "" && dir != "":
		return nil, badInput(fmt.Errorf("%s: give --pool or --tasks, not both", what))
	case dir != "":
		return bundleDir(ctx, st, dir, stderr)
	case pool != "":
		p, err := task.LoadPool(ctx, st, pool)
		if errors.Is(err, store.ErrNotFound) {
			return nil, badInput(fmt.Errorf("pool %q does not exist", pool))
		}
		if err != nil {
			return nil, err
		}
		return p.Tasks, nil
	}
	return nil, nil
}

// taskSource is where a command's tasks come from: an imported pool or a
// task directory (or a directory of them).
type taskSource struct{ pool, dir string }

// register adds the two flags, prefix+"pool" and prefix+"tasks".
func (s *taskSource) register(fs *flag.FlagSet, prefix, poolHelp, dirHelp string) {
	fs.StringVar(&s.pool, prefix+"pool", "", poolHelp)
	fs.StringVar(&s.dir, prefix+"tasks", "", dirHelp)
}

// read reads the tasks from st (see poolOrDir).
func (s taskSource) read(ctx context.Context, st store.Store, what string, stderr io.Writer) ([]task.Ref, error) {
	return poolOrDir(ctx, st, s.pool, s.dir, what, stderr)
}

// openTasks opens the store and reads the tasks a command runs on.
func openTasks(ctx context.Context, storeDir string, src taskSource, what string, stderr io.Writer) (store.Store, []task.Ref, error) {
	st, err := openStore(storeDir)
	if err != nil {
		return nil, nil, err
	}
	refs, err := src.read(ctx, st, what, stderr)
	return st, refs, err
}

// refIDs are the tasks' IDs, for deriving a run's ID from its inputs.
func refIDs(refs []task.Ref) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.ID)
	}
	return out
}
