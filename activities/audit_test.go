package activities

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/t1flow/t1flow/internal/audit"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/store"
	"github.com/t1flow/t1flow/internal/task"
)

// fakeJudge answers every chat call with reply (or HTTP status when > 0)
// and records the prompts it got.
func fakeJudge(t *testing.T, status int, reply string, prompts *[]string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		json.Unmarshal(b, &req)
		if len(req.Messages) > 0 {
			*prompts = append(*prompts, req.Messages[0].Content)
		}
		if status > 0 {
			http.Error(w, "overloaded", status)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": map[string]string{"role": "assistant", "content": reply}, "finish_reason": "stop"}}})
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

func judgeOn(t *testing.T, dir, url string) (audit.ModelVerdict, error) {
	t.Helper()
	ctx := context.Background()
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tk, err := task.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := task.Bundle(ctx, st, tk)
	if err != nil {
		t.Fatal(err)
	}
	a := &Activities{Store: st, TaskCache: t.TempDir()}
	return a.AuditJudge(ctx, AuditJudgeInput{Task: ref, Config: audit.Config{JudgeEndpoint: url, JudgeModel: "judge-1"}})
}

func TestAuditJudgeQuotesAreCheckedAgainstTheTask(t *testing.T) {
	dir := filepath.Join("..", "workflows", "testdata", "audit", "hidden-requirement")
	var prompts []string
	reply := "Here is my verdict:\n```json\n" + `{"clarity": 0.9, "completeness": 0.4, "quote": "Write the sum of the numbers",
	 "reason": "clear", "hidden": [
	  {"assertion": "assert int(open(\"/app/reports/count.txt\").read()) == len(NUMS)", "requirement": "a line count in /app/reports/count.txt"},
	  {"assertion": "assert made_up()", "requirement": "invented"}]}` + "\n```"
	v, err := judgeOn(t, dir, fakeJudge(t, 0, reply, &prompts))
	if err != nil {
		t.Fatal(err)
	}
	if v.Error != "" || v.Model != "judge-1" || v.Clarity != 0.9 || len(v.Hidden) != 1 || v.Dropped != 1 || !strings.Contains(v.Hidden[0].Assertion, "count.txt") {
		t.Fatalf("verdict: %+v", v)
	}
	if len(prompts) != 1 || !strings.Contains(prompts[0], "INSTRUCTION:\nWrite the sum") || !strings.Contains(prompts[0], "TESTS (tests/test_outputs.py)") {
		t.Fatalf("prompt: %q", prompts)
	}
	// garbage is a verdict with an error (the executable checks decide alone)
	v, err = judgeOn(t, dir, fakeJudge(t, 0, "I think it is fine.", &prompts))
	if err != nil || !strings.Contains(v.Error, "no JSON object") {
		t.Fatalf("garbage answer: %+v %v", v, err)
	}
	// an endpoint failure is infrastructure, retried, never a verdict
	_, err = judgeOn(t, dir, fakeJudge(t, 503, "", &prompts))
	if err == nil || !strings.Contains(err.Error(), "judge endpoint") || !isType(err, errs.Infra) {
		t.Fatalf("endpoint failure: %v", err)
	}
}

func isType(err error, typ string) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == typ
}
