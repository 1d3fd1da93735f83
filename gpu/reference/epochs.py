"""Progress of a long training operation (SFT, critic fit), saved at each
finished epoch, so a retry of the same key after a crash goes on from there.

workdir/progress/<sha256 of the key>/ holds epoch.json (the commit point of
an epoch: the key, the request's fingerprint, the committed version the
operation started from, the epoch, and the counters so far) and the
epoch-N.pt it names (the trained model's weights, its optimizer's state, the minibatch
generator's state). Saved progress is used only by the same key on the same
request from the same committed version; the operation's commit removes it.
"""
import hashlib
import json
import os
import shutil

import torch

import commit
import model as M


def _dir(workdir, key):
    return os.path.join(workdir, "progress", hashlib.sha256(key.encode()).hexdigest()[:32])


def drop(workdir, key):
    """Forget a key's progress (its operation committed)."""
    shutil.rmtree(_dir(workdir, key), ignore_errors=True)


def fingerprint(req):
    """What must not change for saved progress to apply: the whole request."""
    return hashlib.sha256(json.dumps(req, sort_keys=True).encode()).hexdigest()


class Progress:
    def __init__(self, workdir, req, version):
        self.key, self.fp, self.version = req["key"], fingerprint(req), version
        self.dir = _dir(workdir, self.key)

    def load(self, model, opt, gen):
        """Restore the last saved epoch into model, opt and gen; returns its
        counters ({"epoch", "step", "losses", "tokens"}) or None."""
        try:
            with open(os.path.join(self.dir, "epoch.json")) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            return None
        if (meta.get("key"), meta.get("fingerprint"), meta.get("version")) != (self.key, self.fp, self.version):
            shutil.rmtree(self.dir, ignore_errors=True)   # another request's, or from another base
            return None
        saved = torch.load(os.path.join(self.dir, meta["file"]), map_location="cpu")
        missing, unexpected = model.load_state_dict(saved["model"], strict=False)
        if M.required_missing(missing) or unexpected:   # an epoch saved before the critic's range: it keeps the committed one
            raise RuntimeError(f"{self.dir}/{meta['file']}: the model's keys missing {missing}, unexpected {unexpected}")
        opt.load_state_dict(saved["opt"])
        gen.set_state(saved["gen"])
        return meta["counters"]

    def save(self, model, opt, gen, counters):
        os.makedirs(self.dir, exist_ok=True)
        name = f"epoch-{counters['epoch']}.pt"
        path = os.path.join(self.dir, name)
        with open(path + ".tmp", "wb") as f:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state()}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
        commit.write_json(os.path.join(self.dir, "epoch.json"), {
            "key": self.key, "fingerprint": self.fp, "version": self.version, "file": name, "counters": counters})
        commit.fsync_dir(self.dir)
        for old in os.listdir(self.dir):   # the epoch before is no longer needed
            if old.endswith(".pt") and old != name:
                os.remove(os.path.join(self.dir, old))
