"""Terminus-2's texts and limits, read from the installed harbor package.

Run with $T1FLOW_HARBOR_PYTHON (scripts/ensure-harbor-env.sh). Nothing of
Harbor's is copied into t1flow: this prints, as one JSON object, what the
harness renders (the prompt template, the timeout template, the completion
confirmation, the output limit's marker) by calling Harbor's own methods, plus
the package's version and a hash of the agent's files, so the harness follows
a Harbor upgrade through the pin alone (docs/harness.md).

    spec.py            the spec as JSON
    spec.py check      read {"replies": [str], "prompts": [{"instruction",
                       "terminal_state"}], "limits": [str], "screens":
                       [{"previous": str|null, "current": str}]} on stdin and
                       print what Harbor's own code makes of each: its
                       parser and feedback, its first prompt, its output
                       limit, its incremental-output rule (the differential
                       tests' reference)
    spec.py drive      read {"container": id, "steps": [[{"keystrokes",
                       "duration"}]]} and run Harbor's TmuxSession in that
                       Docker container (docker exec): start it, send each
                       step's keys as Terminus-2 does, print the incremental
                       output before the first step and after each
"""

import asyncio
import os
import hashlib
import importlib.metadata
import inspect
import json
import logging
import sys
import types
from pathlib import Path, PurePosixPath

# litellm, imported with harbor, would fetch a price list from the internet.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from harbor.agents.terminus_2 import terminus_2 as t2
from harbor.agents.terminus_2.terminus_json_plain_parser import TerminusJSONPlainParser
from harbor.agents.terminus_2.tmux_session import TmuxSession
from harbor.llms.base import LLMResponse

# Sentinels that cannot occur in Harbor's texts: each message is rendered
# around them and split, so the Go side fills in the parts.
TERM = "\x00TERMINAL\x00"


def agent(parser_name="json"):
    """A Terminus2 with only what the message methods read."""
    a = object.__new__(t2.Terminus2)
    a.options = types.SimpleNamespace(parser_name=parser_name, proactive_summarization_threshold=None)
    a._parser = TerminusJSONPlainParser()
    a.logger = logging.getLogger("t1flow-harbor-spec")
    return a


def option_default(name):
    sig = inspect.signature(t2.Terminus2.__init__)
    return sig.parameters[name].default


def limit_marker(a):
    """_limit_output_length's marker as a format with {max_bytes} and {omitted}."""
    max_bytes = 10000
    out = a._limit_output_length("a" * (3 * max_bytes), max_bytes)
    half = max_bytes // 2
    marker = out[half:-half]
    omitted = 3 * max_bytes - 2 * half
    if out[:half] != "a" * half or out[-half:] != "a" * half or str(omitted) not in marker:
        raise SystemExit("harbor spec: _limit_output_length no longer keeps head and tail halves")
    return marker.replace(str(max_bytes), "{max_bytes}", 1).replace(str(omitted), "{omitted}", 1)


def files_hash():
    root = Path(t2.__file__).parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def screen_labels():
    """get_incremental_output's two first lines: the screen, new output."""
    s = object.__new__(TmuxSession)
    s._previous_buffer = None
    screen = {"text": "\x00S\x00"}

    async def capture_pane(capture_entire=False):
        return screen["text"]

    s.capture_pane = capture_pane
    first = asyncio.run(s.get_incremental_output())
    screen["text"] = "\x00S\x00\n\x00N\x00"
    second = asyncio.run(s.get_incremental_output())
    if not first.endswith("\x00S\x00") or "\x00N\x00" not in second:
        raise SystemExit("harbor spec: TmuxSession.get_incremental_output changed shape")
    return first[: -len("\x00S\x00")], second[: second.index("\x00S\x00")]


def as_format(text, fields):
    """text with each sentinel (fields: sentinel -> name) made a {name}
    field and every other brace doubled, for harness.pyFormat."""
    text = text.replace("{", "{{").replace("}", "}}")
    for sentinel, name in fields.items():
        if sentinel not in text:
            raise SystemExit(f"harbor spec: {name} no longer appears in Harbor's text")
        text = text.replace(sentinel, "{" + name + "}")
    return text


class FakeChat:
    def __init__(self, messages):
        self._messages = messages

    @property
    def messages(self):
        return self._messages

    def reset_response_chain(self):
        pass


def handoff_texts():
    """Terminus2._summarize run with its three LLM calls recorded: each
    sub-step's prompt, the history it is sent with, and the context and
    prompt the agent continues with (the handoff)."""
    a = agent()
    a._summarization_count, a._session_id, a._model_name = 0, "t1flow", "t1flow"
    a._prepare_copied_trajectory_steps = lambda n: ([], 1)
    s = {"INSTR": "\x00INSTRUCTION\x00", "SCREEN": "\x00SCREEN\x00", "HIST": "\x00HISTORY\x00"}
    replies = ["\x00SUMMARY\x00", "\x00QUESTIONS\x00", "\x00ANSWERS\x00"]
    calls = []

    async def run_subagent(prompt, message_history, **_):
        calls.append((prompt, list(message_history)))
        return LLMResponse(content=replies[len(calls) - 1]), None

    async def capture_pane(capture_entire=False):
        if capture_entire:
            raise SystemExit("harbor spec: _summarize now reads the whole scrollback, not the visible screen")
        return s["SCREEN"]

    a._run_subagent = run_subagent
    first = {"role": "user", "content": s["HIST"]}
    history = [first, {"role": "assistant", "content": "r"}]
    chat = FakeChat(list(history))
    handoff, _ = asyncio.run(a._summarize(chat, s["INSTR"], types.SimpleNamespace(capture_pane=capture_pane)))
    (summary, h1), (questions, h2), (answers, h3) = calls
    want = (h1 == history and h2 == []
            and h3 == history + [{"role": "user", "content": summary}, {"role": "assistant", "content": replies[0]}]
            and chat.messages == [first, {"role": "user", "content": questions}, {"role": "assistant", "content": replies[1]}])
    if not want:
        raise SystemExit("harbor spec: Terminus2._summarize no longer sends summary, questions and answers as t1flow replays them (docs/harness.md)")
    return {
        "handoff_summary_prompt": as_format(summary, {s["INSTR"]: "instruction"}),
        "handoff_question_prompt": as_format(questions, {s["INSTR"]: "instruction", replies[0]: "summary", s["SCREEN"]: "screen"}),
        "handoff_answer_prompt": as_format(answers, {replies[1]: "questions"}),
        "handoff_prompt": as_format(handoff, {replies[2]: "answers"}),
    }


def length_texts():
    """_query_llm's answer to a reply cut by the output limit: the message
    sent in the same turn, with the limit known ({limit}) or not, and the
    label before the cut reply's parser warnings."""
    out = {}
    cut = '{"analysis": "a", "plan": "p", "commands": [], "extra": 1'
    for limit in (None, 987654321):
        a = agent()
        a._llm_call_kwargs, a._api_request_times = {}, []
        a._llm = types.SimpleNamespace(get_model_output_limit=lambda limit=limit: limit)
        sent = []

        class Chat(FakeChat):
            async def chat(self, prompt, **_):
                sent.append(prompt)
                if len(sent) == 1:
                    raise t2.OutputLengthExceededError("cut", truncated_response=cut)
                return LLMResponse(content="ok")

        chat = Chat([])
        asyncio.run(a._query_llm(chat, "\x00PROMPT\x00"))
        warning = TerminusJSONPlainParser().parse_response(cut).warning
        msg = sent[1]
        if len(sent) != 2 or chat.messages != [{"role": "user", "content": "\x00PROMPT\x00"}, {"role": "assistant", "content": cut}] or not warning or not msg.endswith(warning):
            raise SystemExit("harbor spec: _query_llm no longer answers a cut reply in the same turn as t1flow replays it")
        label = msg[: -len(warning)]
        if limit is None:
            out["length_error"] = label
        else:
            base = label[: label.index("\n\n")]
            out["length_error_limit"] = as_format(base, {"987654321 tokens": "limit"})
            out["length_warnings_label"] = label[len(base):]
    out["length_error"] = out["length_error"][: -len(out["length_warnings_label"])]
    return out


def spec():
    a = agent()
    screen_label, new_output_label = screen_labels()
    confirm = a._get_completion_confirmation_message(TERM)
    before, after = confirm.split(TERM)
    return {
        "harbor_version": importlib.metadata.version("harbor"),
        "agent_sha256": files_hash(),
        "python": list(sys.version_info[:2]),
        "prompt_template": a._get_prompt_template_path().read_text(),
        "timeout_template": a._get_timeout_template_path().read_text(),
        "confirm_before": before,
        "confirm_after": after,
        "error_response_type": a._get_error_response_type(),
        "output_limit_bytes": inspect.signature(a._limit_output_length).parameters["max_bytes"].default,
        "output_limit_marker": limit_marker(a),
        "max_command_seconds": 60,
        "proactive_summarization_threshold": option_default("proactive_summarization_threshold"),
        "pane_width": option_default("tmux_pane_width"),
        "pane_height": option_default("tmux_pane_height"),
        "screen_label": screen_label,
        "new_output_label": new_output_label,
        **handoff_texts(),
        **length_texts(),
    }


def parse(replies):
    """Harbor's parser and feedback (_handle_llm_interaction) for each reply."""
    a = agent()
    out = []
    for reply in replies:
        async def query(chat, prompt, original_instruction="", session=None, reply=reply):
            return LLMResponse(content=reply)

        a._query_llm = query
        commands, complete, feedback, analysis, plan, _ = asyncio.run(a._handle_llm_interaction(None, ""))
        r = TerminusJSONPlainParser().parse_response(reply)
        out.append({
            "commands": [{"keystrokes": c.keystrokes, "duration": c.duration_sec} for c in commands],
            "task_complete": bool(complete),
            "error": r.error,
            "warning": r.warning,
            "feedback": feedback,
            "analysis": analysis if isinstance(analysis, str) else json.dumps(analysis),
            "plan": plan if isinstance(plan, str) else json.dumps(plan),
        })
    return out


def screens(cases):
    """TmuxSession._find_new_content over (previous, current) buffers."""
    out = []
    for c in cases:
        s = object.__new__(TmuxSession)
        s._previous_buffer = c["previous"]
        out.append(asyncio.run(s._find_new_content(c["current"])))
    return out


def check(req):
    a = agent()
    template = a._get_prompt_template_path().read_text()
    return {
        "parsed": parse(req.get("replies", [])),
        "prompts": [template.format(**p) for p in req.get("prompts", [])],
        "limits": [a._limit_output_length(x) for x in req.get("limits", [])],
        "screens": screens(req.get("screens", [])),
    }


class DockerExecEnvironment:
    """The part of BaseEnvironment TmuxSession uses, over docker exec."""

    session_id = "t1flow-drive"

    def __init__(self, container):
        self.container = container

    async def exec(self, command, user=None, **_):
        from harbor.environments.base import ExecResult

        argv = ["docker", "exec", "-i"]
        if user is not None:
            argv += ["-u", str(user)]
        argv += [self.container, "bash", "-c", command]
        p = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await p.communicate()
        return ExecResult(stdout=out.decode(errors="replace"), stderr=err.decode(errors="replace"), return_code=p.returncode)


async def drive(req):
    s = TmuxSession(
        session_name=t2.Terminus2.name(),
        environment=DockerExecEnvironment(req["container"]),
        logging_path=PurePosixPath("/tmp/.t1flow-harbor-drive.pane"),
        local_asciinema_recording_path=None,
        remote_asciinema_recording_path=None,
        pane_width=option_default("tmux_pane_width"),
        pane_height=option_default("tmux_pane_height"),
        user=req.get("user"),
    )
    await s.start()
    out = [await s.get_incremental_output()]
    for step in req["steps"]:
        for c in step:
            await s.send_keys(c["keystrokes"], block=False, min_timeout_sec=c["duration"])
        out.append(await s.get_incremental_output())
    return out


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "spec"
    if mode == "spec":
        json.dump(spec(), sys.stdout)
    elif mode == "drive":
        json.dump(asyncio.run(drive(json.load(sys.stdin))), sys.stdout)
    elif mode == "check":
        json.dump(check(json.load(sys.stdin)), sys.stdout)
    else:
        raise SystemExit(f"spec.py: unknown mode {mode!r} (spec, check, drive)")
