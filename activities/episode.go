package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/t1flow/t1flow/harness"
	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/heartbeat"
	"github.com/t1flow/t1flow/internal/ids"
	"github.com/t1flow/t1flow/internal/trajectory"
)

// segment is what one turn added to the episode, persisted on the sandbox
// host so a restarted worker continues the same episode.
type segment struct {
	Turn        int        `json:"turn"`
	Result      TurnResult `json:"result"`
	PromptLen   int        `json:"prompt_len"`  // input_ids sent to the sampler this turn
	PromptHash  string     `json:"prompt_hash"` // sha256 of those input_ids
	Tokens      []int32    `json:"tokens"`      // appended this turn: [generated..., glue...]
	LossMask    []uint8    `json:"loss_mask"`
	Logprobs    []float32  `json:"logprobs"`
	Routing     []int32    `json:"routing"` // for positions [CoveredFrom, CoveredTo)
	CoveredFrom int        `json:"covered_from"`
	CoveredTo   int        `json:"covered_to"`
	Sampled     []int32    `json:"sampled"` // the sampler's output_ids, verbatim
	// What else the sampler returned, kept apart from the assembled tokens
	// for the drift audit; SamplerMeta is false in turns recorded before.
	SamplerMeta     bool      `json:"sampler_meta,omitempty"`
	MetaPrompt      int       `json:"meta_prompt_tokens,omitempty"`
	MetaCompletion  int       `json:"meta_completion_tokens,omitempty"`
	LogprobIDs      []int32   `json:"logprob_ids,omitempty"`
	SampledLogprobs []float32 `json:"sampled_logprobs,omitempty"`
	// Rendered is Tokens as text, as a text-in harness would hold it (glue
	// text and the sampler's decoded reply), for the re-encoding share.
	Rendered string `json:"rendered,omitempty"`
	// R3 across turns: positions of held routing the sampler recomputed this
	// turn (a prefix-cache miss) and how many of them came back with other experts.
	Recomputed int                     `json:"routing_recomputed,omitempty"`
	Rerouted   int                     `json:"routing_mismatches,omitempty"`
	Version    string                  `json:"version,omitempty"`
	PaneOffset int64                   `json:"pane_offset"`
	Pending    bool                    `json:"pending_complete"`
	Messages   []inference.ChatMessage `json:"messages,omitempty"` // chat agents: appended this turn
	Done       bool                    `json:"done"`
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
	chat     inference.ChatTemplate // with info: the policy's chat template
	facts    *inference.ModelFacts  // the policy's config.json (loadFacts)
}

// end is the trajectory's length: through the last sampled token, which
// has no routing row (covered counts the positions that have one).
func (e *episode) end() int {
	if e.covered == 0 {
		return 0
	}
	// min: an episode journaled before T−1 rows held a row per token.
	return min(e.covered+1, len(e.tokens))
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
	kind := a.InferenceEngine
	if kind == "" {
		kind = inference.EngineT1flow
	}
	p, err := inference.NewEnginePool(kind, urls, nil)
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

// tokenizer encodes text as the policy does: the model-files sidecar, or the
// engine itself (t1flow's servers) when no sidecar is configured.
type tokenizer interface {
	Tokenize(ctx context.Context, session, text string, splitSpecial bool) ([]int, error)
}

// sidecarTokenizer is the model-files sidecar as a tokenizer (it has no sessions).
type sidecarTokenizer struct{ mf *harness.ModelFiles }

func (s sidecarTokenizer) Tokenize(ctx context.Context, _, text string, splitSpecial bool) ([]int, error) {
	return s.mf.Tokenize(ctx, text, splitSpecial)
}

// modelFiles is the configured sidecar's client, nil without one.
func (a *Activities) modelFiles() *harness.ModelFiles {
	if a.ModelFiles == "" {
		return nil
	}
	return &harness.ModelFiles{BaseURL: a.ModelFiles}
}

// tokenizer is the sidecar when one is configured, else the engine's pool.
func (a *Activities) tokenizer(pool *inference.Pool) tokenizer {
	if mf := a.modelFiles(); mf != nil {
		return sidecarTokenizer{mf}
	}
	return pool
}

// tokenize encodes context (prompts, glue) piece by piece: the template's
// glue with special tokens parsed, plain text (observations, model text) with
// them split, so terminal output can never inject a control token.
func tokenize(ctx context.Context, tk tokenizer, session string, pieces harness.Pieces) ([]int32, error) {
	var out []int32
	for _, p := range pieces {
		if p.Text == "" {
			continue
		}
		ids, err := tk.Tokenize(ctx, session, p.Text, p.Plain)
		if err != nil {
			return nil, inferenceErr(err)
		}
		out = append(out, toInt32(ids)...)
	}
	return out, nil
}

// FinishEpisode assembles a model-driven episode on its sandbox host: the
// trajectory (policy agents) goes to the artifact store with its TITO drift
// audit and R3 routing report; the workflow gets the claim check.
func (a *Activities) FinishEpisode(ctx context.Context, in FinishEpisodeInput) (EpisodeResult, error) {
	defer heartbeat.Every(ctx, 5*time.Second, nil)()
	ep, err := a.episode(in.RolloutID, in.Sandbox.Name)
	if err != nil {
		return EpisodeResult{}, err
	}
	res := EpisodeResult{Turns: len(ep.segs), StitchCases: map[string]int{}}
	if len(ep.segs) > 0 && ep.segs[0].PromptLen > 0 {
		res.StitchCases[harness.StitchInitial] = 1
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
	pool, err := a.pool(in.Agent.Inference)
	if err != nil {
		return res, err
	}
	session := in.RolloutID + "/" + in.Sandbox.Name
	if err := a.loadFacts(ctx, pool, session, ep); err != nil {
		return res, err
	}
	f := ep.facts
	// Trailing glue after the last generation was never processed by the
	// sampler: the trajectory ends at its last sampled token.
	n := ep.end()
	rec := trajectory.Record{
		Tokens: ep.tokens[:n], LossMask: ep.mask[:n], Logprobs: ep.logprobs[:n],
		Meta: map[string]string{"rollout_id": in.RolloutID, "task_id": in.Task.ID, "policy_versions": strings.Join(res.PolicyVersions, ",")},
	}
	if f.MoE() {
		rec.Routing, rec.Layers, rec.TopK, rec.Experts = ep.routing, len(f.MoELayers), f.TopK, f.Experts
	}
	if res.Drift, err = a.auditDrift(ctx, pool, session, ep, rec); err != nil {
		return res, err
	}
	if res.Drift.PromptMismatches > 0 || res.Drift.LossMismatches > 0 {
		// Never trained on: the trajectory is not what the sampler saw and emitted.
		return res, errs.RoutingMissingf("TITO drift audit: %d prompt and %d loss-region mismatches against what the sampler was sent and returned", res.Drift.PromptMismatches, res.Drift.LossMismatches)
	}
	if f.MoE() {
		// T−1 rows: every position but the last sampled token's.
		res.Routing = RoutingReport{Positions: n, Covered: len(ep.routing) / (len(f.MoELayers) * f.TopK), Layers: len(f.MoELayers), TopK: f.TopK, Experts: f.Experts}
		res.Routing.Valid = res.Routing.Covered == n-1
		for _, s := range ep.segs {
			res.Routing.Recomputed += s.Recomputed
			res.Routing.Rerouted += s.Rerouted
		}
		if !res.Routing.Valid {
			return res, errs.RoutingMissingf("routing covers %d positions of a %d-token trajectory, which needs %d (T−1)", res.Routing.Covered, n, n-1)
		}
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

// auditDrift runs the drift audit over the first n positions of the
// trajectory as it will be stored, against what the sampler was sent and
// returned, and measures what re-encoding the rendered conversation would
// have changed (one /tokenize per turn, special tokens parsed, as a text
// harness does).
func (a *Activities) auditDrift(ctx context.Context, pool *inference.Pool, session string, ep *episode, rec trajectory.Record) (DriftReport, error) {
	turns := make([]harness.Turn, len(ep.segs))
	var assembled, reencoded [][]int32
	for i, s := range ep.segs {
		turns[i] = harness.Turn{PromptLen: s.PromptLen, PromptHash: s.PromptHash, Sampled: s.Sampled, CheckSamplerMeta: s.SamplerMeta,
			MetaPrompt: s.MetaPrompt, MetaCompletion: s.MetaCompletion, LogprobIDs: s.LogprobIDs, SampledLogprobs: s.SampledLogprobs}
		if !s.SamplerMeta || len(s.Tokens) == 0 {
			continue
		}
		ids, err := a.tokenizer(pool).Tokenize(ctx, session, s.Rendered, false)
		if err != nil {
			return DriftReport{}, inferenceErr(err)
		}
		assembled, reencoded = append(assembled, s.Tokens), append(reencoded, toInt32(ids))
	}
	d := harness.AuditDrift(rec.Tokens, rec.LossMask, rec.Logprobs, turns, len(rec.Tokens))
	if differ, total := harness.ReencodedTokens(assembled, reencoded); total > 0 {
		d.ReencodedContextShare = float64(differ) / float64(total)
	}
	return d, nil
}

// openEpisode starts the sandbox's terminal for a model-driven episode and
// returns the first observation (instruction and screen) and the pane offset.
func (a *Activities) openEpisode(ctx context.Context, in TurnInput) (string, int64, error) {
	t, err := a.fetchTask(ctx, in.Task)
	if err != nil {
		return "", 0, err
	}
	if in.Agent.Terminus2() {
		obs, err := a.t2Open(ctx, in, t.Instruction)
		return obs, 0, err
	}
	out, off, err := a.terminalStep(ctx, in.Sandbox.ContainerID, true, nil, 0, 0, nil)
	if err != nil {
		return "", 0, sandboxErr(err, "start the terminal in %s", in.Sandbox.Name)
	}
	return harness.FirstObservation(t.Instruction, cleanTerminal(out, 2048, 2048)), off, nil
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
