package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/t1flow/t1flow/internal/config"
	"github.com/t1flow/t1flow/internal/ids"
)

const setupUsage = "usage: starter setup"

// setup prepares a cluster for t1flow: it registers the search attributes
// (ids.SearchAttributeFlags) on the namespace the connection settings name.
// Running it again changes nothing.
func setup(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("setup", flag.ContinueOnError)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return badInput(errors.New(setupUsage))
	}
	conn, err := config.LoadTemporal()
	if err != nil {
		return badInput(err)
	}
	c, err := conn.Dial(ctx, slog.LevelError)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintf(stdout, "temporal: %s\n", conn)
	return registerSearchAttributes(ctx, c.OperatorService(), conn.Options.HostPort, conn.Options.Namespace, stdout)
}

// searchAttribute is one of t1flow's search attributes with its type's short name.
type searchAttribute struct {
	name, typ string
	t         enumspb.IndexedValueType
}

func (a searchAttribute) String() string { return a.name + "=" + a.typ }

func wantedSearchAttributes() []searchAttribute {
	var out []searchAttribute
	for _, f := range ids.SearchAttributeFlags {
		name, typ, _ := strings.Cut(f, "=")
		t, err := enumspb.IndexedValueTypeFromString(typ)
		if err != nil {
			panic(fmt.Sprintf("ids.SearchAttributeFlags: %q: %v", f, err))
		}
		out = append(out, searchAttribute{name, typ, t})
	}
	return out
}

// registerSearchAttributes adds the attributes the namespace lacks. One that is
// present with another type is an error, and nothing is added.
func registerSearchAttributes(ctx context.Context, op operatorservice.OperatorServiceClient, addr, ns string, w io.Writer) error {
	want := wantedSearchAttributes()
	resp, err := op.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		return operatorError("list search attributes", err, addr, ns, want)
	}
	var missing, present []searchAttribute
	var conflicts []string
	for _, a := range want {
		have, found := resp.GetCustomAttributes()[a.name]
		if sys, ok := resp.GetSystemAttributes()[a.name]; ok && !found {
			have, found = sys, true
		}
		switch {
		case !found:
			missing = append(missing, a)
		case have != a.t:
			conflicts = append(conflicts, fmt.Sprintf("%s is %s, t1flow needs %s", a.name, shortType(have), a.typ))
		default:
			present = append(present, a)
		}
	}
	if len(conflicts) > 0 {
		return fmt.Errorf("namespace %s already has search attributes of another type: %s; nothing was added. "+
			"Use another namespace, or remove them if nothing uses them (temporal operator search-attribute delete --namespace %s --name NAME)",
			ns, strings.Join(conflicts, "; "), ns)
	}
	if len(present) > 0 {
		fmt.Fprintf(w, "already registered on namespace %s: %s\n", ns, joinAttrs(present))
	}
	if len(missing) == 0 {
		fmt.Fprintf(w, "nothing to do: all %d search attributes are registered\n", len(want))
		return nil
	}
	req := &operatorservice.AddSearchAttributesRequest{Namespace: ns, SearchAttributes: map[string]enumspb.IndexedValueType{}}
	for _, a := range missing {
		req.SearchAttributes[a.name] = a.t
	}
	if _, err := op.AddSearchAttributes(ctx, req); err != nil {
		return operatorError("add search attributes", err, addr, ns, missing)
	}
	fmt.Fprintf(w, "registered on namespace %s: %s\n", ns, joinAttrs(missing))
	return nil
}

// operatorError explains a refused operator call. Temporal Cloud manages
// search attributes through its cloud ops API (tcld, the Cloud UI), not the
// operator service, so on Cloud the answer is the tcld command to run.
func operatorError(what string, err error, addr, ns string, attrs []searchAttribute) error {
	code := status.Code(err)
	refused := code == codes.Unimplemented || code == codes.PermissionDenied || code == codes.Unauthenticated
	if !isCloud(addr) && !refused {
		return fmt.Errorf("%s on namespace %s: %w", what, ns, err)
	}
	var sa []string
	for _, a := range attrs {
		sa = append(sa, fmt.Sprintf("--sa %q", a.String()))
	}
	tcld := fmt.Sprintf("tcld namespace search-attributes add --namespace %s %s", ns, strings.Join(sa, " "))
	if isCloud(addr) {
		return fmt.Errorf("%s on namespace %s: %w\n"+
			"%s is Temporal Cloud, where search attributes are added through the cloud ops API, not the operator service. Run:\n  %s\n"+
			"(or add them in the Cloud UI: Namespaces > %s > Search Attributes), then `starter setup` again to check", what, ns, err, addr, tcld, ns)
	}
	return fmt.Errorf("%s on namespace %s: %w\n"+
		"the operator service refused: these credentials need admin rights on the cluster. If %s is Temporal Cloud behind another name, run:\n  %s",
		what, ns, err, addr, tcld)
}

// isCloud reports whether addr is a Temporal Cloud endpoint: a namespace
// endpoint <namespace>.<account>.tmprl.cloud or a regional API-key endpoint
// <region>.<provider>.api.temporal.io.
func isCloud(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	return strings.HasSuffix(host, ".tmprl.cloud") || strings.HasSuffix(host, ".api.temporal.io")
}

func shortType(t enumspb.IndexedValueType) string {
	for name, v := range enumspb.IndexedValueType_shorthandValue {
		if v == int32(t) {
			return name
		}
	}
	return t.String()
}

func joinAttrs(as []searchAttribute) string {
	var s []string
	for _, a := range as {
		s = append(s, a.String())
	}
	return strings.Join(s, ", ")
}
