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

	"github.com/t1flow/t1flow/harness"
	"github.com/t1flow/t1flow/inference"
	"github.com/t1flow/t1flow/internal/errs"
	"github.com/t1flow/t1flow/internal/ids"
)

// segment is what one turn added to the episode, persisted on the sandbox
// host so a restarted worker continues the same episode.
type segment struct {
	Turn   int        `json:"turn"`
	Result TurnResult `json:"result"`
	// A turn can hold more than one generation: a reply cut by the length
	// limit and the retry that answers it, or a context handoff's
	// sub-steps. Every segment but the turn's last is Partial (Step names
	// it) and is kept in its own file, so a retried turn resumes after it.
	Partial bool   `json:"partial,omitempty"`
	Step    string `json:"step,omitempty"`
	Reply   string `json:"reply,omitempty"` // a partial segment's reply text
	// Context is the token context the segment extends (0: the episode's
	// first; a handoff opens new ones), after dropping the context's last
	// Rewind tokens (the observation glue a handoff never sent).
	Context int `json:"context,omitempty"`
	Rewind  int `json:"rewind,omitempty"`
	// Prompt is Terminus-2's first prompt (turn 0), which a handoff's
	// continuing context starts with.
	Prompt      string    `json:"prompt,omitempty"`
	PromptLen   int       `json:"prompt_len"`  // input_ids sent to the sampler this turn
	PromptHash  string    `json:"prompt_hash"` // sha256 of those input_ids
	Tokens      []int32   `json:"tokens"`      // appended this turn: [generated..., glue...]
	LossMask    []uint8   `json:"loss_mask"`
	Logprobs    []float32 `json:"logprobs"`
	Routing     []int32   `json:"routing"` // for positions [CoveredFrom, CoveredTo)
	CoveredFrom int       `json:"covered_from"`
	CoveredTo   int       `json:"covered_to"`
	Sampled     []int32   `json:"sampled"` // the sampler's output_ids, verbatim
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

// tokenContext is one context the sampler saw, as the trajectory trains
// on it: a handoff starts a new one.
type tokenContext struct {
	tokens   []int32
	mask     []uint8
	logprobs []float32
	routing  []int32
	covered  int
	parts    []int // indexes into episode.all of the segments in it
}

// episode is the assembled state of one sandbox's episode; its
// tokenContext is the context the last segment extended.
type episode struct {
	dir string
	*tokenContext
	contexts []*tokenContext
	segs     []segment // the segment that ended each turn
	partial  []segment // the current turn's partial segments
	all      []segment // every segment, in order
	messages []inference.ChatMessage
	offset   int64
	pending  bool
	info     *inference.ModelInfo
	chat     inference.ChatTemplate // with info: the policy's chat template
	facts    *inference.ModelFacts  // the policy's config.json (loadFacts)
}

// end is the trajectory's length: through the last sampled token, which
// has no routing row (covered counts the positions that have one).
func (c *tokenContext) end() int {
	if c.covered == 0 {
		return 0
	}
	// min: an episode journaled before T−1 rows held a row per token.
	return min(c.covered+1, len(c.tokens))
}

// use makes context i (opened if new) the current one.
func (e *episode) use(i int) {
	for len(e.contexts) <= i {
		e.contexts = append(e.contexts, &tokenContext{})
	}
	e.tokenContext = e.contexts[i]
}

// current is the index of the current context.
func (e *episode) current() int {
	for i, c := range e.contexts {
		if c == e.tokenContext {
			return i
		}
	}
	return 0
}

func (e *episode) apply(s segment) {
	e.all = append(e.all, s)
	if s.Partial {
		e.partial = append(e.partial, s)
	} else {
		e.segs, e.partial = append(e.segs, s), nil
	}
	e.use(s.Context)
	e.parts = append(e.parts, len(e.all)-1)
	if k := len(e.tokens) - s.Rewind; s.Rewind > 0 && k >= 0 {
		e.tokens, e.mask, e.logprobs = e.tokens[:k], e.mask[:k], e.logprobs[:k]
	}
	e.tokens = append(e.tokens, s.Tokens...)
	e.mask = append(e.mask, s.LossMask...)
	e.logprobs = append(e.logprobs, s.Logprobs...)
	e.routing = append(e.routing, s.Routing...)
	if s.CoveredTo > 0 {
		e.covered = s.CoveredTo
	}
	e.messages = append(e.messages, s.Messages...)
	if !s.Partial {
		e.offset, e.pending = s.PaneOffset, s.Pending
	}
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
	e.use(0)
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
	// A partial segment's file sorts before its turn's last: turn-00003.01.json < turn-00003.json.
	name := fmt.Sprintf("turn-%05d.json", s.Turn)
	if s.Partial {
		name = fmt.Sprintf("turn-%05d.%02d.json", s.Turn, len(e.partial)+1)
	}
	p := filepath.Join(e.dir, name)
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
	user, err := a.agentUser(ctx, in, true)
	if err != nil {
		return "", 0, err
	}
	out, off, err := a.terminalStep(ctx, in.Sandbox.ContainerID, user, true, nil, 0, 0, nil)
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
