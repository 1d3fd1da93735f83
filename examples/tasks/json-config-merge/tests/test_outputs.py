import json
import subprocess
import tempfile


def write(obj):
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    f.write(obj if isinstance(obj, str) else json.dumps(obj))
    f.close()
    return f.name


def merge(base, over):
    return subprocess.run(["python3", "/app/merge.py", write(base), write(over)], capture_output=True, text=True, timeout=20)


def test_nested_objects_merge():
    out = merge({"a": {"x": 1, "y": 2}}, {"a": {"y": 3, "z": 4}})
    assert json.loads(out.stdout) == {"a": {"x": 1, "y": 3, "z": 4}}


def test_lists_append_unique():
    out = merge({"l": [1, 2]}, {"l": [2, 3, 1, 4]})
    assert json.loads(out.stdout) == {"l": [1, 2, 3, 4]}


def test_null_removes_key():
    out = merge({"a": 1, "b": {"c": 2, "d": 3}}, {"a": None, "b": {"d": None}})
    assert json.loads(out.stdout) == {"b": {"c": 2}}


def test_output_format():
    out = merge({"b": 1, "a": [1]}, {"c": "x"})
    assert out.stdout.strip() == json.dumps({"a": [1], "b": 1, "c": "x"}, indent=2, sort_keys=True)


def test_bad_input_exits_1():
    out = merge("{not json", {"a": 1})
    assert out.returncode == 1 and out.stdout == "" and out.stderr != ""
