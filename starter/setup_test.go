package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeOperator keeps search attributes as a server would; refuse makes it
// answer every call as Temporal Cloud's front end answers the operator service.
type fakeOperator struct {
	operatorservice.OperatorServiceClient
	attrs  map[string]enumspb.IndexedValueType
	adds   int
	refuse error
}

func (f *fakeOperator) ListSearchAttributes(context.Context, *operatorservice.ListSearchAttributesRequest, ...grpc.CallOption) (*operatorservice.ListSearchAttributesResponse, error) {
	if f.refuse != nil {
		return nil, f.refuse
	}
	return &operatorservice.ListSearchAttributesResponse{
		CustomAttributes: f.attrs,
		SystemAttributes: map[string]enumspb.IndexedValueType{"WorkflowType": enumspb.INDEXED_VALUE_TYPE_KEYWORD},
	}, nil
}

func (f *fakeOperator) AddSearchAttributes(_ context.Context, req *operatorservice.AddSearchAttributesRequest, _ ...grpc.CallOption) (*operatorservice.AddSearchAttributesResponse, error) {
	f.adds++
	for k, v := range req.SearchAttributes {
		if _, ok := f.attrs[k]; ok {
			return nil, status.Errorf(codes.AlreadyExists, "search attribute %s already exists", k)
		}
		f.attrs[k] = v
	}
	return &operatorservice.AddSearchAttributesResponse{}, nil
}

func TestSetupRegistersOnceAndSaysWhat(t *testing.T) {
	op := &fakeOperator{attrs: map[string]enumspb.IndexedValueType{"TaskID": enumspb.INDEXED_VALUE_TYPE_KEYWORD}}
	var out bytes.Buffer
	if err := registerSearchAttributes(context.Background(), op, "temporal.internal:7233", "rl", &out); err != nil {
		t.Fatal(err)
	}
	if len(op.attrs) != 8 || op.attrs["Reward"] != enumspb.INDEXED_VALUE_TYPE_DOUBLE || op.attrs["Step"] != enumspb.INDEXED_VALUE_TYPE_INT {
		t.Fatalf("attributes after setup: %v", op.attrs)
	}
	for _, want := range []string{"already registered on namespace rl: TaskID=Keyword", "registered on namespace rl: CampaignID=Keyword, Stage=Keyword, RolloutID=Keyword", "Reward=Double"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := registerSearchAttributes(context.Background(), op, "temporal.internal:7233", "rl", &out); err != nil || op.adds != 1 {
		t.Fatalf("second run: %v, %d add calls", err, op.adds)
	}
	if !strings.Contains(out.String(), "nothing to do: all 8 search attributes are registered") {
		t.Fatalf("second run output: %s", out.String())
	}
}

func TestSetupRefusesAnotherType(t *testing.T) {
	op := &fakeOperator{attrs: map[string]enumspb.IndexedValueType{"Reward": enumspb.INDEXED_VALUE_TYPE_KEYWORD}}
	err := registerSearchAttributes(context.Background(), op, "temporal.internal:7233", "rl", &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "Reward is Keyword, t1flow needs Double") || !strings.Contains(err.Error(), "nothing was added") {
		t.Fatalf("want the conflict named: %v", err)
	}
	if op.adds != 0 {
		t.Fatal("nothing may be added when a type conflicts")
	}
}

func TestSetupOnCloudPrintsTcld(t *testing.T) {
	for _, addr := range []string{"rl.a1b2c.tmprl.cloud:7233", "us-east-1.aws.api.temporal.io:7233"} {
		op := &fakeOperator{attrs: map[string]enumspb.IndexedValueType{}, refuse: status.Error(codes.PermissionDenied, "Request unauthorized.")}
		err := registerSearchAttributes(context.Background(), op, addr, "rl.a1b2c", &bytes.Buffer{})
		want := `tcld namespace search-attributes add --namespace rl.a1b2c --sa "CampaignID=Keyword" --sa "Stage=Keyword" --sa "TaskID=Keyword" ` +
			`--sa "RolloutID=Keyword" --sa "Outcome=Keyword" --sa "Step=Int" --sa "Attempt=Int" --sa "Reward=Double"`
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "is Temporal Cloud") {
			t.Fatalf("%s: want the tcld command:\n%v", addr, err)
		}
	}
	if !isCloud("rl.a1b2c.tmprl.cloud:7233") || isCloud("temporal.internal:7233") || isCloud("127.0.0.1:7233") {
		t.Fatal("isCloud")
	}
}

func TestSetupOtherFailuresAreNotBlamedOnCloud(t *testing.T) {
	op := &fakeOperator{refuse: status.Error(codes.Unavailable, "connection refused")}
	err := registerSearchAttributes(context.Background(), op, "temporal.internal:7233", "rl", &bytes.Buffer{})
	if err == nil || strings.Contains(err.Error(), "tcld") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("%v", err)
	}
}
