"""Names of the training monitor (spec 4.3, 4.9): shortened parameter names, tags, rank folders."""

from __future__ import annotations

import datetime
import difflib
import re
import uuid

# the reference shortens a name to the part from the last '.layer.'/'.layers.', else '.embedding(s).', ...
_SQUASH = [re.compile(p) for p in (r"^.*\.(layers?\..*)", r"^.*\.(embeddings?\..*)", r"^.*\.(final.*)",
                                   r"^.*\.(output.*)", r"^.*\.(norm.*)")]
# output folders carry the Asia/Shanghai clock whatever the machine's zone (UTC+8, no daylight saving)
_SHANGHAI = datetime.timezone(datetime.timedelta(hours=8))
TIME_FORMAT = "%b%d_%H-%M-%S"
RANK_DIR = re.compile(r"([\w-]{0,20})-rank(\d{1,5})-")

# tag kind -> output prefix (csv file stem)
KIND_PREFIX = {"actv": "actv", "actv_grad": "actv_grad", "pre_grad": "grad_unreduced", "acc_grad": "grad_unreduced",
               "post_grad": "grad_reduced", "exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq",
               "param_origin": "param_origin", "param_updated": "param_updated", "mg_direction": "other"}
MICRO_PREFIXES = ("actv", "actv_grad", "attention_hook")


def squash_name(name: str, enable: bool = True) -> str:
    if not enable:
        return name
    for pat in _SQUASH:
        m = pat.match(name)
        if m:
            return m.group(1)
    return name


def tag(name: str, rank: int, kind: str) -> str:
    return f"{name}/rank{rank}/{kind}"


_CC_KIND = re.compile(r"^(pre|post)_\d+$")


def csv_name(tag_name: str) -> str:
    """The CSV ``name`` cell: the tag without its '{vpp}:' prefix, ':{micro}' suffix, rank and kind.  A
    communication op keeps its kind (``all_reduce.post_0``): the reference drops it too and its rows of one op
    then share one name."""
    parts = tag_name.split("/")
    name = parts[0]
    if len(parts) == 3 and _CC_KIND.match(parts[2]):
        return f"{name}.{parts[2]}"
    head, sep, rest = name.partition(":")
    if sep and head.isdigit():
        name = rest
    base, sep, micro = name.rpartition(":")
    if sep and micro.isdigit():
        name = base
    return name


def time_tag(now=None) -> str:
    now = now or datetime.datetime.now(tz=_SHANGHAI)
    return now.astimezone(_SHANGHAI).strftime(TIME_FORMAT)


def rank_dir_name(rank: int, now=None) -> str:
    return f"{time_tag(now)}-rank{rank}-{uuid.uuid4().hex[:8]}"


def close_names(name: str, names, n: int = 3) -> list:
    """Up to ``n`` names close to ``name`` (similar spelling, else names sharing its first part)."""
    names = list(names)
    close = difflib.get_close_matches(name, names, n=n, cutoff=0.6)
    if not close:
        head = name.split(".")[0]
        close = [x for x in names if x.split(".")[0] == head][:n]
    return close
