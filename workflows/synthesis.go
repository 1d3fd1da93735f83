package workflows

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/t1flow/t1flow/activities"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// SynthesisInput grows one seed by recursive task synthesis.
type SynthesisInput struct {
	RunID         string               `json:"run_id"`
	Seed          task.Ref             `json:"seed"`
	Chain         int                  `json:"chain"` // several chains per seed differ by RNG stream
	Rounds        int                  `json:"rounds"`
	MaxVariations int                  `json:"max_variations"` // tries per round before the seed stops growing
	RNGSeed       int64                `json:"rng_seed"`
	Synth         activities.SynthSpec `json:"synth"`
}

// RoundRecord is one accepted round: a valid Harbor task with its lineage.
type RoundRecord struct {
	Round      int      `json:"round"`
	Variation  int      `json:"variation"`
	Task       task.Ref `json:"task"`
	Parent     string   `json:"parent"`
	Steps      []string `json:"steps"`
	Categories []string `json:"categories"`
	Oracle     string   `json:"oracle"` // passed/total of the reference in a fresh sandbox
	Nop        string   `json:"nop"`    // passed/total of the untouched environment
}

// Rejection is a variation that was not accepted, and why.
type Rejection struct {
	Round     int    `json:"round"`
	Variation int    `json:"variation"`
	Class     string `json:"class"` // invalid_output, oracle_failed, nop_passed, infra
	Reason    string `json:"reason"`
}

// SynthesisResult is the chain: accepted rounds, rejections, and why it stopped.
type SynthesisResult struct {
	Seed     task.Ref      `json:"seed"`
	Chain    int           `json:"chain"`
	Accepted []RoundRecord `json:"accepted"`
	Rejected []Rejection   `json:"rejected"`
	Stopped  string        `json:"stopped,omitempty"`
}

// SynthesisProgress is what the "progress" query answers.
type SynthesisProgress struct {
	Round     int `json:"round"`
	Variation int `json:"variation"`
	Accepted  int `json:"accepted"`
	Rejected  int `json:"rejected"`
}

type synthesis struct {
	in       SynthesisInput
	res      SynthesisResult
	prog     SynthesisProgress
	campaign string // of the candidates' oracle and nop rollouts
}

// SynthesisWorkflow runs RST rounds on one seed. A round is accepted only if
// the candidate's reference solution passes in a fresh sandbox and the
// untouched environment fails its verifier; a rejected round retries with a
// new variation up to MaxVariations, then the seed stops growing.
func SynthesisWorkflow(ctx workflow.Context, in SynthesisInput) (SynthesisResult, error) {
	return execute(ctx, &synthesis{in: in})
}

func (s *synthesis) setup(ctx workflow.Context) error {
	if s.in.Rounds <= 0 || s.in.Seed.ID == "" {
		return temporal.NewNonRetryableApplicationError("synthesis: rounds must be > 0 and seed set", errs.BadInput, nil)
	}
	if s.in.MaxVariations <= 0 {
		s.in.MaxVariations = 3
	}
	if err := s.in.Synth.Validate(); err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), errs.BadInput, nil)
	}
	s.res = SynthesisResult{Seed: s.in.Seed, Chain: s.in.Chain, Accepted: []RoundRecord{}, Rejected: []Rejection{}}
	if err := workflow.SetQueryHandler(ctx, QueryProgress, func() (SynthesisProgress, error) { return s.prog, nil }); err != nil {
		return err
	}
	workflow.UpsertTypedSearchAttributes(ctx, ids.CampaignID.ValueSet(s.in.RunID), ids.Stage.ValueSet("synth"), ids.TaskID.ValueSet(s.in.Seed.ID))
	s.campaign = ids.SynthesisCampaignID(s.in.RunID, s.in.Seed.ID, s.in.Chain)
	return nil
}

func (s *synthesis) run(ctx workflow.Context) (SynthesisResult, error) {
	in, res := s.in, &s.res
	cur := in.Seed
	var lineage []string
	for round := 1; round <= in.Rounds; round++ {
		var accepted *RoundRecord
		for v := 0; v < in.MaxVariations && accepted == nil; v++ {
			var err error
			if accepted, err = s.variation(ctx, round, v, cur, lineage); err != nil {
				return *res, err
			}
		}
		if accepted == nil {
			last := res.Rejected[len(res.Rejected)-1]
			res.Stopped = fmt.Sprintf("round %d: %d variations rejected; last: %s", round, in.MaxVariations, last.Reason)
			break
		}
		res.Accepted = append(res.Accepted, *accepted)
		s.prog.Accepted++
		lineage = append(lineage, accepted.Steps...)
		cur = accepted.Task
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("%d rounds accepted, %d variations rejected. %s", len(res.Accepted), len(res.Rejected), res.Stopped))
	return *res, nil
}

// variation synthesizes one candidate from cur and tests it. A rejected
// candidate is recorded and comes back nil; an error means the workflow was
// cancelled or the synthesizer's endpoint failed every retry.
func (s *synthesis) variation(ctx workflow.Context, round, v int, cur task.Ref, lineage []string) (*RoundRecord, error) {
	in := s.in
	s.prog.Round, s.prog.Variation = round, v
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("round %d/%d, variation %d; %d accepted", round, in.Rounds, v+1, len(s.res.Accepted)))
	reject := func(class, reason string) (*RoundRecord, error) {
		s.res.Rejected = append(s.res.Rejected, Rejection{Round: round, Variation: v, Class: class, Reason: reason})
		s.prog.Rejected++
		return nil, nil
	}
	var cand activities.SynthesizeResult
	sctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: ids.ControlQueue, StartToCloseTimeout: 10 * time.Minute,
		// A worker killed mid-call is noticed in 30 s, not at the 10-minute
		// start-to-close: the activity heartbeats while it works.
		HeartbeatTimeout: ControlHeartbeat,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5,
			NonRetryableErrorTypes: []string{errs.SynthesisRejected, errs.BadInput, errs.TaskInvalid}},
		Summary: fmt.Sprintf("synthesize round %d variation %d", round, v+1),
	})
	err := workflow.ExecuteActivity(sctx, act.Synthesize, activities.SynthesizeInput{
		Seed: in.Seed, Parent: cur, Chain: in.Chain, Round: round, Variation: v, RNGSeed: in.RNGSeed, Steps: lineage, Synth: in.Synth,
	}).Get(ctx, &cand)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		class := "infra"
		if k := errorType(err); k == errs.SynthesisRejected || k == errs.TaskInvalid {
			class = "invalid_output"
		} else if workflow.GetVersion(ctx, "synth-infra-fails-chain", workflow.DefaultVersion, 1) == 1 {
			// An endpoint that failed every retry says nothing about the
			// proposal: the chain fails loudly instead of counting a rejection.
			return nil, temporal.NewApplicationError(fmt.Sprintf("round %d variation %d: %s", round, v+1, oneLine(err)), errs.Infra)
		}
		return reject(class, oneLine(err))
	}
	// The reference must pass in a fresh sandbox, and the untouched
	// environment must fail: both run as ordinary rollouts.
	probe := func(stage string) RolloutInput {
		return RolloutInput{CampaignID: s.campaign, Stage: stage, Step: round, Task: cand.Task, Attempt: 1}
	}
	oin, nin := probe("synth-oracle"), probe("synth-nop")
	oin.Agent, nin.Agent = activities.AgentSpec{Kind: activities.AgentOracle}, activities.AgentSpec{Kind: activities.AgentNop}
	oin.TurnCap, nin.TurnCap = 1, 1
	oracle := startRollout(ctx, oin, fmt.Sprintf("oracle on %s", cand.Task.Name))
	nop := startRollout(ctx, nin, fmt.Sprintf("nop on %s", cand.Task.Name))
	o := rolloutOutcome(ctx, oracle, probe("synth-oracle"))
	n := rolloutOutcome(ctx, nop, probe("synth-nop"))
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	probesJudged(ctx, &o, &n)
	switch {
	case !o.Scored || !n.Scored:
		why := strings.Trim(o.Error+"; "+n.Error, "; ")
		return reject("infra", fmt.Sprintf("sandbox runs not scored: oracle %s, nop %s (%s)", o.Outcome, n.Outcome, why))
	case !o.Resolved:
		return reject("oracle_failed", fmt.Sprintf("the reference solution fails in a fresh sandbox: %d/%d assertions", o.Passed, o.Total))
	case n.Resolved:
		return reject("nop_passed", fmt.Sprintf("the untouched environment passes the verifier: %d/%d", n.Passed, n.Total))
	}
	return &RoundRecord{Round: round, Variation: v, Task: cand.Task, Parent: cur.ID, Steps: cand.Steps, Categories: cand.Categories,
		Oracle: fmt.Sprintf("%d/%d", o.Passed, o.Total), Nop: fmt.Sprintf("%d/%d", n.Passed, n.Total)}, nil
}

// probesJudged makes a candidate's oracle and nop runs what RST judges. A
// verifier that failed is an agent's 0 (verifier-error-scored), but in the
// reference's run or the untouched environment's it says the candidate's
// verifier cannot run: not scored, as the audit judges it (auditRun), so
// the candidate is rejected as infra naming the verifier error. Read as a
// scored 0, a nop whose verifier hangs passed as "the environment fails" and
// the candidate was accepted; histories from before GetVersion
// synth-verifier-error-unscored replay so.
func probesJudged(ctx workflow.Context, o, n *RolloutResult) {
	broken := func(r *RolloutResult) bool { return r.Scored && r.Outcome == OutcomeVerifierError }
	if !broken(o) && !broken(n) || workflow.GetVersion(ctx, "synth-verifier-error-unscored", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	for _, r := range []*RolloutResult{o, n} {
		if broken(r) {
			r.Scored = false
		}
	}
}

// ChainFailedPrefix starts a failed chain's Stopped reason.
const ChainFailedPrefix = "chain failed: "

// SynthSweepInput is seeds × chains, then the accepted tasks into a pool.
type SynthSweepInput struct {
	RunID string     `json:"run_id"`
	Seeds []task.Ref `json:"seeds"`
	// SeedManifest is a stored task.Pool holding the seeds instead (give one
	// of the two); inline seeds are moved to synth/<run>/seeds.json in the
	// first run of a windowed sweep.
	SeedManifest  *store.Ref           `json:"seed_manifest,omitempty"`
	PerSeed       int                  `json:"per_seed"`
	Rounds        int                  `json:"rounds"`
	MaxVariations int                  `json:"max_variations"`
	RNGSeed       int64                `json:"rng_seed"`
	Synth         activities.SynthSpec `json:"synth"`
	Concurrency   int                  `json:"concurrency"`
	Pool          string               `json:"pool"`
	// ContinueEvery is how many chains a run starts before it continues as
	// new (0: DefaultContinueEvery).
	ContinueEvery int `json:"continue_every,omitempty"`
	// Window is what a run hands the next; callers leave it nil.
	Window *SynthWindow `json:"window,omitempty"`
}

// SynthSummary aggregates a sweep.
type SynthSummary struct {
	Seeds          int            `json:"seeds"`
	Chains         int            `json:"chains"`
	Synthesized    int            `json:"synthesized"` // accepted tasks
	Variations     int            `json:"variations"`  // candidates tried
	Rejected       map[string]int `json:"rejected"`    // by class
	Stopped        int            `json:"stopped"`     // chains that stopped growing early
	Failed         int            `json:"failed"`      // chains that failed (e.g. the synthesizer endpoint), each named in its Stopped
	Categories     map[string]int `json:"categories"`  // step categories of accepted rounds
	SolutionLength map[string]int `json:"solution_length"`
	AddedToPool    int            `json:"added_to_pool"`
}

// NewSynthSummary is the summary of a sweep of seeds before any chain.
func NewSynthSummary(seeds int) SynthSummary {
	return SynthSummary{Seeds: seeds, Rejected: map[string]int{}, Categories: map[string]int{}, SolutionLength: map[string]int{}}
}

// Add counts one chain in the summary.
func (s *SynthSummary) Add(c SynthesisResult) {
	s.Chains++
	s.Synthesized += len(c.Accepted)
	s.Variations += len(c.Accepted) + len(c.Rejected)
	if strings.HasPrefix(c.Stopped, ChainFailedPrefix) {
		s.Failed++
	} else if c.Stopped != "" {
		s.Stopped++
	}
	for _, r := range c.Rejected {
		s.Rejected[r.Class]++
	}
	for _, a := range c.Accepted {
		for _, cat := range a.Categories {
			s.Categories[cat]++
		}
		s.SolutionLength[fmt.Sprintf("%d extra steps", a.Round)]++
	}
}

// AcceptedTasks are the tasks of the chains' accepted rounds, by name.
func AcceptedTasks(chains []SynthesisResult) []task.Ref {
	var tasks []task.Ref
	for _, c := range chains {
		for _, a := range c.Accepted {
			tasks = append(tasks, a.Task)
		}
	}
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].Name < tasks[j].Name })
	return tasks
}

// SynthReport is the sweep's stored report.
type SynthReport struct {
	RunID   string            `json:"run_id"`
	Pool    string            `json:"pool"`
	Summary SynthSummary      `json:"summary"`
	Chains  []SynthesisResult `json:"chains"`
}

// SynthSweepResult is small: the summary and the report's claim check. The
// accepted tasks are inline (Tasks) up to SynthInlineTasks of them, and
// since synth-sweep-windowed also stored as a task.Pool (TaskManifest, nil
// when none was accepted), which an audit sweep takes as its task_manifest.
type SynthSweepResult struct {
	Summary      SynthSummary `json:"summary"`
	Report       store.Ref    `json:"report"`
	Tasks        []task.Ref   `json:"tasks"`
	TaskManifest *store.Ref   `json:"task_manifest,omitempty"`
}

// SynthSweepWorkflow runs a SynthesisWorkflow per (seed, chain) with bounded
// concurrency and adds every accepted round to the pool. Since GetVersion
// synth-sweep-windowed it reads its seeds a page at a time from a manifest,
// stores its chains' results in chunks and continues as new (synthsweep.go):
// a sweep of any size. Histories from before replay the one-run sweep below.
func SynthSweepWorkflow(ctx workflow.Context, in SynthSweepInput) (SynthSweepResult, error) {
	if workflow.GetVersion(ctx, "synth-sweep-windowed", workflow.DefaultVersion, 1) == 1 {
		return synthSweepWindowed(ctx, in)
	}
	return synthSweepInline(ctx, in)
}

// synthSweepInline is the sweep in one run: every seed, child and chain
// result in its input, history and memory (a few thousand chains at most).
func synthSweepInline(ctx workflow.Context, in SynthSweepInput) (SynthSweepResult, error) {
	in.defaults()
	if len(in.Seeds) == 0 || in.Pool == "" {
		return SynthSweepResult{}, temporal.NewNonRetryableApplicationError("synth sweep: seeds and pool are required", errs.BadInput, nil)
	}
	workflow.UpsertTypedSearchAttributes(ctx, ids.CampaignID.ValueSet(in.RunID), ids.Stage.ValueSet("synth"))
	type job struct{ seed, chain int }
	var jobs []job
	for s := range in.Seeds {
		for c := 0; c < in.PerSeed; c++ {
			jobs = append(jobs, job{s, c})
		}
	}
	prog := Progress{Total: len(jobs)}
	if err := workflow.SetQueryHandler(ctx, QueryProgress, func() (Progress, error) { return prog, nil }); err != nil {
		return SynthSweepResult{}, err
	}
	chains := make([]SynthesisResult, len(jobs))
	err := slidingWindow(ctx, len(jobs), fixedConcurrency(in.Concurrency), &prog.Running,
		func(i int) workflow.Future {
			j := jobs[i]
			seed := in.Seeds[j.seed]
			cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
				WorkflowID: ids.SynthesisWorkflowID(in.RunID, seed.ID, j.chain), TaskQueue: ids.ControlQueue,
				StaticSummary: fmt.Sprintf("RST on %s, chain %d", seed.Name, j.chain),
			})
			return workflow.ExecuteChildWorkflow(cctx, SynthesisWorkflow, in.chainInput(seed, j.chain))
		},
		func(i int, f workflow.Future) {
			prog.Done++
			var r SynthesisResult
			if err := f.Get(ctx, &r); err != nil {
				r = failedChain(in.Seeds[jobs[i].seed], jobs[i].chain, err)
			}
			prog.Resolved += len(r.Accepted)
			chains[i] = r
		})
	if err != nil {
		return SynthSweepResult{}, err
	}
	sum := NewSynthSummary(len(in.Seeds))
	for _, c := range chains {
		sum.Add(c)
	}
	tasks := AcceptedTasks(chains)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: ids.ControlQueue, StartToCloseTimeout: 5 * time.Minute, HeartbeatTimeout: ControlHeartbeat,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 10},
	})
	if len(tasks) > 0 {
		if err := workflow.ExecuteActivity(actx, act.ImportToPool, activities.ImportInput{Pool: in.Pool, Tasks: tasks}).Get(ctx, &sum.AddedToPool); err != nil {
			return SynthSweepResult{}, err
		}
	}
	out := SynthSweepResult{Summary: sum, Tasks: tasks}
	err = workflow.ExecuteActivity(actx, act.StoreJSON, activities.StoreJSONInput{
		Key: SynthReportKey(in.RunID), Value: SynthReport{RunID: in.RunID, Pool: in.Pool, Summary: sum, Chains: chains},
	}).Get(ctx, &out.Report)
	workflow.SetCurrentDetails(ctx, synthDetails(sum, in.Pool))
	return out, err
}

func (in *SynthSweepInput) defaults() {
	if in.PerSeed <= 0 {
		in.PerSeed = 1
	}
	if in.Concurrency <= 0 {
		in.Concurrency = 2
	}
}

// chainInput is the input of the sweep's chain on seed.
func (in SynthSweepInput) chainInput(seed task.Ref, chain int) SynthesisInput {
	return SynthesisInput{RunID: in.RunID, Seed: seed, Chain: chain, Rounds: in.Rounds, MaxVariations: in.MaxVariations, RNGSeed: in.RNGSeed, Synth: in.Synth}
}

// failedChain is the result of a chain that failed.
func failedChain(seed task.Ref, chain int, err error) SynthesisResult {
	return SynthesisResult{Seed: seed, Chain: chain, Stopped: ChainFailedPrefix + oneLine(err)}
}

func synthDetails(sum SynthSummary, pool string) string {
	return fmt.Sprintf("%d tasks synthesized from %d seeds (%d variations, %d rejected); %d added to pool %s",
		sum.Synthesized, sum.Seeds, sum.Variations, sum.Variations-sum.Synthesized, sum.AddedToPool, pool)
}

// SynthReportKey is where a synthesis sweep's report is stored.
func SynthReportKey(run string) string { return "synth/" + ids.Clean(run) + "/report.json" }
