#!/usr/bin/env python3
"""Print every key of Harbor's task.toml schema as JSON, for t1flow's
conformance test (internal/task/harborkeys_test.go).

Walks harbor.models.task.config.TaskConfig's pydantic fields recursively: a
field whose type is (a list of, a union with, an optional) model contributes
its own key and its model's fields as dotted keys
("environment.healthcheck.command", "steps.verifier.env"). Lists of tables are
written like tables ("artifacts.source"), as t1flow names them in errors.

Run with Harbor's interpreter:
  .t1flow/harborenv/bin/python scripts/harbor-task-keys.py \
      > internal/task/testdata/harbor-0.26-task-keys.json
"""

import importlib.metadata
import json
import sys
import typing

from pydantic import BaseModel

from harbor.models.task.config import TaskConfig


def models_in(annotation):
    """The pydantic models an annotation holds (through Optional, list, Union, dict values)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found = []
    for arg in typing.get_args(annotation):
        for m in models_in(arg):
            if m not in found:
                found.append(m)
    return found


def walk(model, prefix, out, seen):
    # Forward references ("list['MCPServerConfig']") stay strings in
    # model_fields until the model is rebuilt with its module's names.
    model.model_rebuild(force=True)
    for name, field in model.model_fields.items():
        key = prefix + name
        out.add(key)
        for sub in models_in(field.annotation):
            # A model nested in itself would recurse forever; Harbor has none,
            # but stop on a repeat along one path all the same.
            if sub in seen:
                continue
            walk(sub, key + ".", out, seen | {sub})


def main():
    keys = set()
    walk(TaskConfig, "", keys, {TaskConfig})
    json.dump(
        {
            "harbor": importlib.metadata.version("harbor"),
            "schema_version": TaskConfig.model_fields["schema_version"].default,
            "keys": sorted(keys),
        },
        sys.stdout,
        indent=1,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
