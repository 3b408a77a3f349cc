"""Communication ops: which API names are collectives / point-to-point ops, and their direction."""

from __future__ import annotations

COMM_PREFIXES = ("Distributed", "MintDistributed", "communication.comm_func")
# the reference's keyword set (substring test, so 'reduce' also covers all_reduce, reduce_scatter, ...)
COMM_KEYWORDS = (
    "send", "recv", "broadcast", "all_reduce", "reduce", "all_gather", "gather", "isend", "irecv", "scatter",
    "reduce_scatter", "_reduce_scatter_base", "_all_gather_base", "all_to_all_single", "all_to_all",
    "all_gather_into_tensor", "reduce_scatter_tensor", "send_object_list", "recv_object_list",
)
# the counterpart of a point-to-point API on the peer rank; other APIs pair with themselves
P2P_COUNTERPART = {
    "send": "recv", "recv": "send", "isend": "irecv", "irecv": "isend",
    "send_object_list": "recv_object_list", "recv_object_list": "send_object_list",
}
SRC, DST, LINK = "src", "dst", "link"
OPPOSITE = {SRC: DST, DST: SRC}
# APIs with a direction: the data goes from the 'src' side to the 'dst' side
DIRECTED_API = {
    "send": DST, "recv": SRC, "isend": DST, "irecv": SRC, "broadcast": SRC, "scatter": SRC, "gather": DST,
    "send_object_list": DST, "recv_object_list": SRC,
}
RANK_ARG_NAMES = ("dst", "group_dst", "src", "group_src")


def is_communication_op(api: str) -> bool:
    return api.startswith(COMM_PREFIXES) and any(k in api for k in COMM_KEYWORDS)


def api_kind(api: str) -> str:
    """'Distributed.all_reduce.0.forward' -> 'all_reduce' (second dotted part)."""
    parts = api.split(".")
    return parts[1] if len(parts) > 1 else api
