"""The model-files sidecar: a checkpoint's own files, served to the Go worker
over loopback HTTP, so the harness renders and tokenizes exactly as the
model's template and tokenizer do, whichever engine (stock vLLM or SGLang,
t1flow's hf server) serves it.

    python gpu/hf/modelfiles.py --model DIR --port P [--host 127.0.0.1]

Everything comes from DIR's files: config.json (verbatim at /model_config),
tokenizer_config.json / chat_template.jinja / tokenizer.json (loaded and
rendered by transformers). Routes (JSON; errors are HTTP 400 {"error"} naming
the field):

  GET  /health        {"ok": true}
  GET  /model_config  config.json as it is on disk
  GET  /chat          the chat contract (chat_contract below)
  POST /render        {"messages": [{"role", "content"}], "add_generation_prompt": bool}
                      -> {"text", "tokens"}: the template's own render, tokenized
                      with the specials it wrote parsed as specials
  POST /tokenize      {"text", "split_special_tokens": bool} -> {"tokens"}; split
                      encodes special-token text as plain text (observations, as
                      slime does); no BOS/EOS is ever added
  POST /detokenize    {"tokens": [int]} -> {"text"}

The chat contract is also what gpu/hf/server.py loads a checkpoint with (one
copy: hfmoe imports it from here).
"""
import argparse
import json
import os
import sys
import threading

REFERENCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reference")


class ChatTemplateError(ValueError):
    pass


def special_tokens(tok):
    """Every special (added) token's text -> ID."""
    return {t.content: int(tid) for tid, t in tok.added_tokens_decoder.items() if t.special}


_SYS, _USER, _USER2, _ASST = "T1SYSTEMq7", "T1USERq7", "T1USERTWOq7", "T1ASSISTANTq7"


def template_source(path):
    """The file a checkpoint's chat template comes from, for error messages."""
    where = os.path.join(path, "tokenizer_config.json")
    if os.path.exists(os.path.join(path, "chat_template.jinja")):
        where += " (chat_template.jinja)"
    return where


def chat_contract(tok, path):
    """The chat template as pieces: the first prompt is system_prefix + SYS +
    end_of_turn + turn_separator + user_prefix + OBS + end_of_turn +
    turn_separator + assistant_prefix, and a later turn appends the reply, then
    end_of_turn + turn_separator + user_prefix + OBS + end_of_turn +
    turn_separator + assistant_prefix. Read off the tokenizer's own template by
    rendering sentinel messages; a ChatTemplateError names the template's file
    when the template does not split that way.

    default_system: the system message the template writes itself when the
    conversation has none (SmolLM2's does: "You are a helpful AI assistant
    named SmolLM..."), "" when it writes none; a conversation without a system
    message renders as one whose system message is default_system (verified).
    default_system_block is that block's full text (system_prefix +
    default_system + end_of_turn + turn_separator), "" when none."""
    where = template_source(path)

    def fail(why):
        raise ChatTemplateError(f"{where}: the chat template cannot be split into system/user/assistant prefixes, "
                                f"end of turn and separator: {why}")

    def render(msgs):
        try:
            return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        except Exception as e:  # a template without a system role raises from Jinja
            fail(f"rendering {[m['role'] for m in msgs]} failed: {e}")

    if not getattr(tok, "chat_template", None):
        fail("there is no chat_template")
    first = render([{"role": "system", "content": _SYS}, {"role": "user", "content": _USER}])
    i_s, i_u = first.find(_SYS), first.find(_USER)
    if i_s < 0 or i_u < i_s:
        fail(f"the system and user messages do not appear in order in {first!r}")
    system_prefix = first[:i_s]
    middle = first[i_s + len(_SYS):i_u]                 # end_of_turn + separator + user_prefix
    tail = first[i_u + len(_USER):]                     # end_of_turn + separator + assistant_prefix
    specials = sorted(special_tokens(tok), key=len, reverse=True)
    eot = next((s for s in specials if middle.startswith(s)), None)
    if eot is None:
        fail(f"the system turn does not end with a special token ({middle!r})")
    rest = middle[len(eot):]
    nxt = [rest.find(s) for s in specials if rest.find(s) >= 0]
    if not nxt:
        fail(f"the user turn does not open with a special token ({rest!r})")
    sep, user_prefix = rest[:min(nxt)], rest[min(nxt):]
    if not tail.startswith(eot + sep):
        fail(f"the user turn does not end as the system turn does ({tail!r})")
    assistant_prefix = tail[len(eot + sep):]
    c = {"system_prefix": system_prefix, "user_prefix": user_prefix, "assistant_prefix": assistant_prefix,
         "end_of_turn": eot, "turn_separator": sep}
    if first != system_prefix + _SYS + eot + sep + user_prefix + _USER + eot + sep + assistant_prefix:
        fail(f"the pieces do not rebuild {first!r}")
    two = render([{"role": "system", "content": _SYS}, {"role": "user", "content": _USER},
                  {"role": "assistant", "content": _ASST}, {"role": "user", "content": _USER2}])
    want = first + _ASST + eot + sep + user_prefix + _USER2 + eot + sep + assistant_prefix
    if two != want:
        fail(f"a second turn renders as {two!r}, not {want!r}")
    c.update(_default_system(render, c, fail))
    eot_id = tok.convert_tokens_to_ids(eot)
    if not isinstance(eot_id, int) or eot_id == tok.unk_token_id:
        fail(f"end of turn {eot!r} is not a single token")
    c["end_of_turn_id"] = int(eot_id)
    return c


def _default_system(render, c, fail):
    """What the template writes before the first user turn of a conversation
    without a system message: nothing, or a system turn of its own."""
    eot, sep = c["end_of_turn"], c["turn_separator"]
    user_only = render([{"role": "user", "content": _USER}])
    turn = c["user_prefix"] + _USER + eot + sep + c["assistant_prefix"]
    if not user_only.endswith(turn):
        fail(f"a conversation without a system message renders as {user_only!r}, which does not end with {turn!r}")
    block = user_only[:-len(turn)]
    if not block:
        return {"default_system": "", "default_system_block": ""}
    head, tail = c["system_prefix"], eot + sep
    if not (block.startswith(head) and block.endswith(tail) and len(block) >= len(head) + len(tail)):
        fail(f"the template writes {block!r} before the user turn when there is no system message, "
             f"which is not a system turn ({head!r} ... {tail!r})")
    return {"default_system": block[len(head):len(block) - len(tail)], "default_system_block": block}


class ModelFiles:
    """A checkpoint directory's config, tokenizer and chat template."""

    def __init__(self, path):
        from transformers import AutoTokenizer

        if not os.path.isdir(path):
            raise FileNotFoundError(f"--model {path}: no such directory")
        for name in ("config.json", "tokenizer_config.json"):
            if not os.path.exists(os.path.join(path, name)):
                raise FileNotFoundError(f"--model {path}: no {name} (a Hugging Face checkpoint directory has one)")
        with open(os.path.join(path, "config.json")) as f:
            self.config = json.load(f)
        self.path = path
        self.tok = AutoTokenizer.from_pretrained(path)
        self.chat = chat_contract(self.tok, path)
        self.lock = threading.Lock()   # the fast tokenizer's split_special_tokens switch is shared state

    def encode(self, text, split):
        with self.lock:
            return list(self.tok(text, add_special_tokens=False, split_special_tokens=split)["input_ids"])

    def decode(self, ids):
        return self.tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def render(self, req):
        msgs = req.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise _bad("messages must be a non-empty list of {role, content}")
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise _bad(f"messages[{i}] must be an object with string role and content")
        gen = req.get("add_generation_prompt", True)
        if not isinstance(gen, bool):
            raise _bad("add_generation_prompt must be true or false")
        msgs = [{"role": m["role"], "content": m["content"]} for m in msgs]
        text = self.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
        return {"text": text, "tokens": self.encode(text, split=False)}

    def tokenize(self, req):
        if not isinstance(req.get("text"), str):
            raise _bad("text must be a string")
        split = req.get("split_special_tokens", False)
        if not isinstance(split, bool):
            raise _bad("split_special_tokens must be true or false")
        return {"tokens": self.encode(req["text"], split)}

    def detokenize(self, req):
        ids = req.get("tokens")
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise _bad("tokens must be a list of token IDs")
        n = len(self.tok)
        bad = [t for t in ids if t < 0 or t >= n]
        if bad:
            raise _bad(f"tokens: {bad[0]} is outside the vocabulary (0..{n - 1})")
        return {"text": self.decode(ids)}

    def routes(self):
        return {
            ("GET", "/health"): lambda _: {"ok": True},
            ("GET", "/model_config"): lambda _: self.config,
            ("GET", "/chat"): lambda _: self.chat,
            ("POST", "/render"): self.render,
            ("POST", "/tokenize"): self.tokenize,
            ("POST", "/detokenize"): self.detokenize,
        }


def _bad(msg):
    import httpjson

    return httpjson.HTTPError(400, msg)


def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="Hugging Face checkpoint directory (config.json, tokenizer files)")
    ap.add_argument("--port", type=int, required=True, help="port to listen on (0: any free one)")
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback unless told)")
    return ap


def main():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.path.insert(0, REFERENCE)
    import httpjson

    args = parser().parse_args()
    try:
        mf = ModelFiles(args.model)
    except (ChatTemplateError, FileNotFoundError, ValueError, OSError) as e:
        raise SystemExit(f"modelfiles.py: {e}")
    httpjson.serve(args.host, args.port, mf.routes(), f"t1flow model files ({args.model})").serve_forever()


if __name__ == "__main__":
    main()
