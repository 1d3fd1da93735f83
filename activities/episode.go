package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/httpjson"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/text"
	"github.com/t1flow/t1flow/internal/trajectory"
)

// Stitch cases: how one turn's sampled tokens join the next turn's context.
// Every boundary falls in exactly one case, recorded per turn.
const (
	StitchInitial    = "initial"     // the first prompt, tokenized once
	StitchEOT        = "eot"         // stopped on <|im_end|>: observation glue follows the sampled tokens
	StitchEOS        = "eos"         // stopped on another stop token: <|im_end|> added as glue (masked)
	StitchLength     = "length"      // hit max_new_tokens: <|im_end|> added as glue (masked)
	StitchStopString = "stop_string" // stopped on a stop string: <|im_end|> added as glue (masked)
)

// segment is what one turn added to the episode, persisted on the sandbox
// host so a restarted worker continues the same episode.
type segment struct {
	Turn        int                     `json:"turn"`
	Result      TurnResult              `json:"result"`
	PromptLen   int                     `json:"prompt_len"`  // input_ids sent to the sampler this turn
	PromptHash  string                  `json:"prompt_hash"` // sha256 of those input_ids
	Tokens      []int32                 `json:"tokens"`      // appended this turn: [generated..., glue...]
	LossMask    []uint8                 `json:"loss_mask"`
	Logprobs    []float32               `json:"logprobs"`
	Routing     []int32                 `json:"routing"` // for positions [CoveredFrom, CoveredTo)
	CoveredFrom int                     `json:"covered_from"`
	CoveredTo   int                     `json:"covered_to"`
	Sampled     []int32                 `json:"sampled"` // the sampler's output_ids, verbatim
	Version     string                  `json:"version,omitempty"`
	PaneOffset  int64                   `json:"pane_offset"`
	Pending     bool                    `json:"pending_complete"`
	Messages    []inference.ChatMessage `json:"messages,omitempty"` // chat agents: appended this turn
	Done        bool                    `json:"done"`
}

// episode is the assembled state of one sandbox's episode.
type episode struct {
	dir      string
	segs     []segment
	tokens   []int32
	mask     []uint8
	logprobs []float32
	routing  []int32
	covered  int
	messages []inference.ChatMessage
	offset   int64
	pending  bool
	info     *inference.ModelInfo
}

func (e *episode) apply(s segment) {
	e.segs = append(e.segs, s)
	e.tokens = append(e.tokens, s.Tokens...)
	e.mask = append(e.mask, s.LossMask...)
	e.logprobs = append(e.logprobs, s.Logprobs...)
	e.routing = append(e.routing, s.Routing...)
	if s.CoveredTo > 0 {
		e.covered = s.CoveredTo
	}
	e.messages = append(e.messages, s.Messages...)
	e.offset = s.PaneOffset
	e.pending = s.Pending
}

type episodes struct {
	mu    sync.Mutex
	cache map[string]*episode
}

func (a *Activities) episodeDir(rolloutID, sandbox string) string {
	root := a.EpisodeDir
	if root == "" {
		root = filepath.Join(os.TempDir(), "t1flow-episodes")
	}
	return filepath.Join(root, ids.Clean(rolloutID)+"--"+ids.Clean(sandbox))
}

// episode loads (or starts) the state of a rollout's current sandbox.
func (a *Activities) episode(rolloutID, sandbox string) (*episode, error) {
	dir := a.episodeDir(rolloutID, sandbox)
	a.eps.mu.Lock()
	defer a.eps.mu.Unlock()
	if a.eps.cache == nil {
		a.eps.cache = map[string]*episode{}
	}
	if e, ok := a.eps.cache[dir]; ok {
		return e, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, errs.Infraf("episode dir: %v", err)
	}
	e := &episode{dir: dir}
	files, _ := filepath.Glob(filepath.Join(dir, "turn-*.json"))
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, errs.Infraf("episode %s: %v", f, err)
		}
		var s segment
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, errs.Infraf("episode %s: %v", f, err)
		}
		e.apply(s)
	}
	a.eps.cache[dir] = e
	return e, nil
}

// forgetEpisodeOf drops a destroyed sandbox's episode state.
func (a *Activities) forgetEpisodeOf(rolloutID, sandbox string) {
	dir := a.episodeDir(rolloutID, sandbox)
	a.eps.mu.Lock()
	delete(a.eps.cache, dir)
	a.eps.mu.Unlock()
	os.RemoveAll(dir)
}

// commit persists a turn atomically, then adds it to the episode.
func (e *episode) commit(s segment) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	p := filepath.Join(e.dir, fmt.Sprintf("turn-%05d.json", s.Turn))
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return errs.Infraf("episode: %v", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return errs.Infraf("episode: %v", err)
	}
	e.apply(s)
	return nil
}

func hashTokens(ts []int32) string {
	h := sha256.New()
	for _, t := range ts {
		fmt.Fprintf(h, "%d,", t)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func (a *Activities) pool(urls []string) (*inference.Pool, error) {
	key := strings.Join(urls, ",")
	a.poolsMu.Lock()
	defer a.poolsMu.Unlock()
	if a.pools == nil {
		a.pools = map[string]*inference.Pool{}
	}
	if p, ok := a.pools[key]; ok {
		return p, nil
	}
	p, err := inference.NewPool(urls, nil)
	if err != nil {
		return nil, errs.BadInputf("%v", err)
	}
	a.pools[key] = p
	return p, nil
}

// inferenceErr maps an inference failure onto the error table.
func inferenceErr(err error) error {
	if inference.Retryable(err) {
		return errs.Infraf("inference: %v", err)
	}
	return errs.BadInputf("inference rejected the request: %v", err)
}

const defaultMaxNewTokens = 512

// modelTurn runs one turn of a model-driven agent.
func (a *Activities) modelTurn(ctx context.Context, in TurnInput) (TurnResult, error) {
	ep, err := a.episode(in.RolloutID, in.Sandbox.Name)
	if err != nil {
		return TurnResult{}, err
	}
	if in.Turn < len(ep.segs) {
		// The turn finished before a crash hid its result: report it, do not redo it.
		return ep.segs[in.Turn].Result, nil
	}
	if in.Turn != len(ep.segs) {
		return TurnResult{}, errs.Infraf("episode %s has %d turns, asked for turn %d", ep.dir, len(ep.segs), in.Turn)
	}
	if n := len(ep.segs); n > 0 && ep.segs[n-1].Done {
		return TurnResult{Turn: in.Turn, Done: true, EndReason: ep.segs[n-1].Result.EndReason}, nil
	}
	if in.Agent.Kind == AgentChat {
		return a.chatTurn(ctx, in, ep)
	}
	return a.policyTurn(ctx, in, ep)
}

func (a *Activities) policyTurn(ctx context.Context, in TurnInput, ep *episode) (TurnResult, error) {
	start := time.Now()
	pool, err := a.pool(in.Agent.Inference)
	if err != nil {
		return TurnResult{}, err
	}
	session := in.RolloutID + "/" + in.Sandbox.Name
	if ep.info == nil {
		info, err := pool.ModelInfo(ctx, session)
		if err != nil {
			return TurnResult{}, inferenceErr(err)
		}
		ep.info = &info
	}
	info := ep.info
	seg := segment{Turn: in.Turn}
	var glue []int32
	if in.Turn == 0 {
		obs, off, err := a.openEpisode(ctx, in)
		if err != nil {
			return TurnResult{}, err
		}
		seg.PaneOffset = off
		prompt := "<|im_start|><|system|>" + SystemPrompt + "<|im_end|><|im_start|><|user|>" +
			obs + "<|im_end|><|im_start|><|assistant|>"
		ids, err := pool.Tokenize(ctx, session, prompt)
		if err != nil {
			return TurnResult{}, inferenceErr(err)
		}
		glue = toInt32(ids)
	}
	promptTokens := append(append([]int32{}, ep.tokens...), glue...)
	maxNew := in.Agent.MaxNewTokens
	if maxNew <= 0 {
		maxNew = defaultMaxNewTokens
	}
	limit := info.BlockSize
	if in.Agent.MaxContext > 0 && in.Agent.MaxContext < limit {
		limit = in.Agent.MaxContext
	}
	if len(promptTokens)+maxNew > limit {
		// A normal end, not a failure: the next turn would not fit.
		seg.Result = TurnResult{Turn: in.Turn, Done: true, EndReason: EndContextExhausted}
		seg.Done = true
		seg.PaneOffset = max(seg.PaneOffset, ep.offset)
		return seg.Result, ep.commit(seg)
	}
	im := info.SpecialTokens["<|im_end|>"]
	tInf := time.Now()
	resp, err := pool.Generate(ctx, session, inference.GenerateRequest{
		InputIDs:       toInts(promptTokens),
		SamplingParams: inference.SamplingParams{Temperature: in.Agent.Temperature, MaxNewTokens: maxNew, StopTokenIDs: []int{im}},
		ReturnLogprob:  true, ReturnRoutedExperts: true, RoutedExpertsStartLen: ep.covered,
	})
	if err != nil {
		return TurnResult{}, inferenceErr(err)
	}
	seg.Result.InferenceMs = time.Since(tInf).Milliseconds()
	out := toInt32(resp.OutputIDs)
	lps, err := resp.Logprobs()
	if err != nil || len(lps) != len(out) {
		return TurnResult{}, errs.Infraf("inference: %d log-probs for %d tokens (%v)", len(lps), len(out), err)
	}
	routing, err := captureRouting(resp, *info, ep.covered, len(promptTokens)+len(out))
	if err != nil {
		return TurnResult{}, err
	}
	seg.PromptLen, seg.PromptHash = len(promptTokens), hashTokens(promptTokens)
	seg.Sampled = out
	seg.Version = resp.MetaInfo.WeightVersion
	seg.CoveredFrom, seg.CoveredTo = ep.covered, len(promptTokens)+len(out)
	seg.Routing = routing
	// Context glue of this turn (the first prompt), then the sampled tokens.
	seg.Tokens = append(glue, out...)
	seg.LossMask = append(make([]uint8, len(glue)), ones(len(out))...)
	seg.Logprobs = append(make([]float32, len(glue)), lps...)
	seg.Result.Stitch = stitchCase(resp, im)

	// Act on the response.
	reply := resp.Text
	action, cmds, summary, perr := parseTurn(reply)
	budget := time.Duration(in.TimeoutSec * float64(time.Second))
	tTerm := time.Now()
	raw, off, err := a.terminalStep(ctx, in.Sandbox.ContainerID, false, cmds, ep.offset, budget)
	if err != nil {
		return TurnResult{}, sandboxErr(err, "turn %d in %s", in.Turn, in.Sandbox.Name)
	}
	seg.Result.TerminalMs = time.Since(tTerm).Milliseconds()
	seg.PaneOffset = off
	terminal := cleanTerminal(raw, 2048, 2048)
	var obs string
	done := false
	switch {
	case perr != nil:
		obs = correctiveObservation(perr, terminal)
		seg.Result.ParseError = perr.Error()
	case action.TaskComplete && ep.pending:
		done = true
	case action.TaskComplete:
		seg.Pending = true
		obs = confirmObservation(terminal)
	default:
		obs = outputObservation(terminal)
	}
	if !done {
		// Observation glue for the next turn, tokenized once and masked.
		g := "<|im_start|><|user|>" + obs + "<|im_end|><|im_start|><|assistant|>"
		if seg.Result.Stitch != StitchEOT {
			g = "<|im_end|>" + g // close the assistant turn the sampler left open
		}
		ids, err := pool.Tokenize(ctx, session, g)
		if err != nil {
			return TurnResult{}, inferenceErr(err)
		}
		seg.Tokens = append(seg.Tokens, toInt32(ids)...)
		seg.LossMask = append(seg.LossMask, make([]uint8, len(ids))...)
		seg.Logprobs = append(seg.Logprobs, make([]float32, len(ids))...)
	}
	seg.Done = done
	seg.Result.Turn = in.Turn
	seg.Result.Command = strings.Join(summary, " ; ")
	seg.Result.Tokens = len(out)
	seg.Result.DurationMs = time.Since(start).Milliseconds()
	seg.Result.Preview = text.Truncate(terminal, PreviewBytes)
	seg.Result.OutputBytes = int64(len(raw))
	if done {
		seg.Result.Final, seg.Result.EndReason = true, EndTaskComplete
	}
	if err := ep.commit(seg); err != nil {
		return TurnResult{}, err
	}
	return seg.Result, nil
}

// parseTurn reads the model's answer: the action, its keystrokes, and one
// line per command for the UI summary (empty when the answer is invalid).
func parseTurn(text string) (Action, []Keys, []string, error) {
	action, err := ParseAction(text)
	if err != nil {
		return action, nil, nil, err
	}
	summary := make([]string, 0, len(action.Commands))
	for _, c := range action.Commands {
		summary = append(summary, strings.TrimSpace(c.Keystrokes))
	}
	return action, action.Commands, summary, nil
}

// stitchCase names how generation stopped.
func stitchCase(resp *inference.GenerateResponse, im int) string {
	fr := resp.MetaInfo.FinishReason
	switch fr["type"] {
	case "length":
		return StitchLength
	case "stop":
		switch m := fr["matched"].(type) {
		case float64:
			if int(m) == im {
				return StitchEOT
			}
			return StitchEOS
		case string:
			return StitchStopString
		}
	}
	return StitchLength
}

// captureRouting validates one turn's routed experts: every position the
// sampler processed since `from`, with the model's layers and top-k, expert
// IDs in range, and no all-zero MoE layer. Anything else is RoutingMissing.
func captureRouting(resp *inference.GenerateResponse, info inference.ModelInfo, from, to int) ([]int32, error) {
	r, err := resp.RoutedExperts()
	if err != nil {
		return nil, errs.RoutingMissingf("%v", err)
	}
	per := info.NumLayers * info.TopK
	if per == 0 {
		return nil, errs.RoutingMissingf("model info reports %d layers × top-%d: not an MoE model", info.NumLayers, info.TopK)
	}
	if len(r) != (to-from)*per {
		return nil, errs.RoutingMissingf("routing has %d entries, expected %d positions × %d layers × top-%d = %d", len(r), to-from, info.NumLayers, info.TopK, (to-from)*per)
	}
	nonzero := make([]bool, info.NumLayers)
	for i, e := range r {
		if e < 0 || int(e) >= info.NumExperts {
			return nil, errs.RoutingMissingf("expert ID %d at position %d is outside [0, %d)", e, from+i/per, info.NumExperts)
		}
		if e != 0 {
			nonzero[(i%per)/info.TopK] = true
		}
	}
	if to-from > 1 || info.TopK > 1 {
		for l, ok := range nonzero {
			if !ok {
				return nil, errs.RoutingMissingf("layer %d is all zero across %d positions (capture failed)", l, to-from)
			}
		}
	}
	return r, nil
}

func toInt32(v []int) []int32 {
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

func toInts(v []int32) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

func ones(n int) []uint8 {
	out := make([]uint8, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

// chatTurn drives a hosted model over chat completions: text in and out,
// eval only, so there are no token IDs to keep.
func (a *Activities) chatTurn(ctx context.Context, in TurnInput, ep *episode) (TurnResult, error) {
	start := time.Now()
	key := ""
	if in.Agent.APIKeyEnv != "" {
		key = os.Getenv(in.Agent.APIKeyEnv)
	}
	cc := &inference.ChatClient{BaseURL: strings.TrimSuffix(in.Agent.Endpoint, "/"), Model: in.Agent.Model, APIKey: key}
	seg := segment{Turn: in.Turn, PaneOffset: ep.offset}
	msgs := append([]inference.ChatMessage{}, ep.messages...)
	if in.Turn == 0 {
		obs, off, err := a.openEpisode(ctx, in)
		if err != nil {
			return TurnResult{}, err
		}
		seg.PaneOffset = off
		seg.Messages = []inference.ChatMessage{{Role: "system", Content: SystemPrompt}, {Role: "user", Content: obs}}
		msgs = append(msgs, seg.Messages...)
	}
	maxNew := in.Agent.MaxNewTokens
	if maxNew <= 0 {
		maxNew = defaultMaxNewTokens
	}
	reply, _, err := cc.Complete(ctx, msgs, maxNew, in.Agent.Temperature)
	if err != nil {
		var se *httpjson.StatusError
		if errors.As(err, &se) && se.Status == 400 && strings.Contains(strings.ToLower(se.Msg), "context") {
			seg.Result = TurnResult{Turn: in.Turn, Done: true, EndReason: EndContextExhausted}
			seg.Done = true
			return seg.Result, ep.commit(seg)
		}
		return TurnResult{}, inferenceErr(err)
	}
	seg.Messages = append(seg.Messages, inference.ChatMessage{Role: "assistant", Content: reply})
	action, cmds, summary, perr := parseTurn(reply)
	raw, off, err := a.terminalStep(ctx, in.Sandbox.ContainerID, false, cmds, seg.PaneOffset, time.Duration(in.TimeoutSec*float64(time.Second)))
	if err != nil {
		return TurnResult{}, sandboxErr(err, "turn %d in %s", in.Turn, in.Sandbox.Name)
	}
	seg.PaneOffset = off
	terminal := cleanTerminal(raw, 2048, 2048)
	switch {
	case perr != nil:
		seg.Messages = append(seg.Messages, inference.ChatMessage{Role: "user", Content: correctiveObservation(perr, terminal)})
		seg.Result.ParseError = perr.Error()
	case action.TaskComplete && ep.pending:
		seg.Done = true
		seg.Result.Final, seg.Result.EndReason = true, EndTaskComplete
	case action.TaskComplete:
		seg.Pending = true
		seg.Messages = append(seg.Messages, inference.ChatMessage{Role: "user", Content: confirmObservation(terminal)})
	default:
		seg.Messages = append(seg.Messages, inference.ChatMessage{Role: "user", Content: outputObservation(terminal)})
	}
	seg.Result.Turn = in.Turn
	seg.Result.Command = strings.Join(summary, " ; ")
	seg.Result.DurationMs = time.Since(start).Milliseconds()
	seg.Result.Preview = text.Truncate(terminal, PreviewBytes)
	seg.Result.OutputBytes = int64(len(raw))
	if err := ep.commit(seg); err != nil {
		return TurnResult{}, err
	}
	return seg.Result, nil
}

// FinishEpisode assembles a model-driven episode on its sandbox host: the
// trajectory (policy agents) goes to the artifact store with its TITO drift
// audit and R3 routing report; the workflow gets the claim check.
func (a *Activities) FinishEpisode(ctx context.Context, in FinishEpisodeInput) (EpisodeResult, error) {
	ep, err := a.episode(in.RolloutID, in.Sandbox.Name)
	if err != nil {
		return EpisodeResult{}, err
	}
	res := EpisodeResult{Turns: len(ep.segs), StitchCases: map[string]int{}}
	if len(ep.segs) > 0 && ep.segs[0].PromptLen > 0 {
		res.StitchCases[StitchInitial] = 1
	}
	versions := map[string]bool{}
	for _, s := range ep.segs {
		if s.Result.Stitch != "" {
			res.StitchCases[s.Result.Stitch]++
		}
		if s.Result.ParseError != "" {
			res.ParseErrors++
		}
		if s.Version != "" {
			versions[s.Version] = true
		}
	}
	for v := range versions {
		res.PolicyVersions = append(res.PolicyVersions, v)
	}
	sort.Strings(res.PolicyVersions)
	if in.Agent.Kind != AgentPolicy || ep.covered == 0 {
		return res, nil
	}
	info := ep.info
	if info == nil {
		pool, err := a.pool(in.Agent.Inference)
		if err != nil {
			return res, err
		}
		i, err := pool.ModelInfo(ctx, in.RolloutID+"/"+in.Sandbox.Name)
		if err != nil {
			return res, inferenceErr(err)
		}
		info = &i
	}
	// Trailing glue after the last generation was never processed by the
	// sampler: the trajectory ends at the last covered position.
	n := ep.covered
	rec := trajectory.Record{
		Tokens: ep.tokens[:n], LossMask: ep.mask[:n], Logprobs: ep.logprobs[:n], Routing: ep.routing,
		Layers: info.NumLayers, TopK: info.TopK, Experts: info.NumExperts,
		Meta: map[string]string{"rollout_id": in.RolloutID, "task_id": in.Task.ID, "policy_versions": strings.Join(res.PolicyVersions, ",")},
	}
	res.Drift = auditDrift(ep, n)
	res.Routing = RoutingReport{Positions: n, Covered: len(ep.routing) / max(1, info.NumLayers*info.TopK), Layers: info.NumLayers, TopK: info.TopK, Experts: info.NumExperts}
	res.Routing.Valid = res.Routing.Covered == n
	if !res.Routing.Valid {
		return res, errs.RoutingMissingf("routing covers %d of %d positions", res.Routing.Covered, n)
	}
	res.Tokens = n
	for _, m := range rec.LossMask {
		res.LossTokens += int(m)
	}
	b, err := rec.Encode()
	if err != nil {
		return res, errs.Infraf("encode trajectory: %v", err)
	}
	ref, err := a.Store.Put(ctx, fmt.Sprintf("rollouts/%s/trajectory-%s.safetensors", ids.Clean(in.RolloutID), ids.Clean(in.Sandbox.Name)), strings.NewReader(string(b)))
	if err != nil {
		return res, errs.Infraf("store trajectory: %v", err)
	}
	res.Trajectory = &ref
	return res, nil
}

// auditDrift checks TITO: every turn's prompt is exactly the tokens recorded
// before it, and the loss region is exactly the sampled IDs.
func auditDrift(ep *episode, n int) DriftReport {
	var d DriftReport
	var sampled []int32
	for _, s := range ep.segs {
		if s.PromptLen == 0 {
			continue // no generation this turn (context exhausted)
		}
		if s.PromptLen > len(ep.tokens) || hashTokens(ep.tokens[:s.PromptLen]) != s.PromptHash {
			d.PromptMismatches++
		}
		sampled = append(sampled, s.Sampled...)
	}
	var loss []int32
	for i := 0; i < n; i++ {
		if ep.mask[i] == 1 {
			loss = append(loss, ep.tokens[i])
		}
	}
	for i := range max(len(loss), len(sampled)) {
		if i >= len(loss) || i >= len(sampled) || loss[i] != sampled[i] {
			d.LossMismatches++
		}
	}
	if len(loss) > 0 {
		d.Drift = float64(d.LossMismatches) / float64(len(loss))
	}
	// Observations and glue are tokenized from their own text, never from
	// decoded model output: nothing is re-encoded.
	d.ReencodedContextShare = 0
	return d
}

// openEpisode starts the sandbox's terminal for a model-driven episode and
// returns the first observation (instruction and screen) and the pane offset.
func (a *Activities) openEpisode(ctx context.Context, in TurnInput) (string, int64, error) {
	t, err := a.fetchTask(ctx, in.Task)
	if err != nil {
		return "", 0, err
	}
	out, off, err := a.terminalStep(ctx, in.Sandbox.ContainerID, true, nil, 0, 0)
	if err != nil {
		return "", 0, sandboxErr(err, "start the terminal in %s", in.Sandbox.Name)
	}
	return firstObservation(t.Instruction, cleanTerminal(out, 2048, 2048)), off, nil
}
