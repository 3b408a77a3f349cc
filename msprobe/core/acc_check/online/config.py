"""The online pre-check's configuration: the checker side (config.json block ``run_ut`` with ``is_online``) and
the training side (block ``tensor`` with ``online_run_ut``). Every problem is one MsprobeError line."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

from msprobe.core.errors import MsprobeError

#: keys of the "tensor" block that belong to the online pre-check (training side)
CLIENT_KEYS = ("online_run_ut", "nfs_path", "host", "port", "tls_path", "online_run_ut_recompute")
_IPV4 = re.compile(r"^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$")


@dataclass(frozen=True)
class OnlineConfig:
    """Where the two sides meet: a shared directory (``nfs_path``) or host:port, TLS when ``tls_path``."""

    nfs_path: str = ""
    host: str = ""
    port: int = -1
    tls_path: str = ""
    rank_list: Tuple[int, ...] = (0,)
    white_list: Tuple[str, ...] = ()
    black_list: Tuple[str, ...] = ()
    error_data_path: str = "./"
    source: str = ""
    #: training side: ``online_run_ut_recompute`` (the backward aten ops are not captured then)
    recompute: bool = False

    @property
    def transport(self) -> str:
        return "shared directory" if self.nfs_path else ("TLS" if self.tls_path else "TCP")

    def where(self) -> str:
        return f"shared directory {self.nfs_path}" if self.nfs_path else f"{self.host}:{self.port}"


def _fail(where: str, key: str, value: Any, advice: str) -> MsprobeError:
    return MsprobeError(f"{where}: \"{key}\" is {value!r}; {advice}")


def _check_common(where: str, block: dict, side: str) -> dict:
    """nfs_path / host / port / tls_path, shared by both sides. ``side``: "server" or "client"."""
    out = {}
    nfs = block.get("nfs_path", "")
    if not isinstance(nfs, str):
        raise _fail(where, "nfs_path", nfs, "it must be a folder path string (\"\" for TCP)")
    if nfs:
        if not os.path.isdir(nfs):
            raise _fail(where, "nfs_path", nfs, "that folder does not exist; create it on the shared storage first")
        if not os.access(nfs, os.R_OK | os.W_OK | os.X_OK):
            raise _fail(where, "nfs_path", nfs, "that folder is not readable and writable by this user")
        out["nfs_path"] = os.path.abspath(nfs)
        return out  # host, port and tls_path are ignored with a shared directory
    host = block.get("host", "")
    if not isinstance(host, str) or not _IPV4.match(host):
        raise MsprobeError(f"{where}: host: {host!r} is invalid; give the checker machine's IPv4 address "
                           f"(e.g. \"127.0.0.1\"), or an nfs_path")
    port = block.get("port", -1)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port <= 65535:
        raise MsprobeError(f"{where}: port: {port!r} is invalid, port range 0-65535 (a free port above 1023)")
    out.update(host=host, port=port)
    tls = block.get("tls_path", "")
    if not isinstance(tls, str):
        raise _fail(where, "tls_path", tls, "it must be a folder path string (\"\" for plain TCP)")
    if tls:
        names = ("server.crt", "server.key") if side == "server" else ("client.crt", "client.key")
        for n in names:
            p = os.path.join(tls, n)
            if not os.path.isfile(p):
                raise MsprobeError(f"{where}: tls_path {tls}: {n} is missing; the {side} side needs "
                                   f"{' and '.join(names)} there (or set tls_path to \"\" for plain TCP)")
        check_tls_files(os.path.join(tls, names[0]), os.path.join(tls, names[1]), where)
        out["tls_path"] = os.path.abspath(tls)
    return out


def check_tls_files(cert: str, key: str, where: str) -> None:
    """The certificate and key load into a TLS context (one line naming the file otherwise)."""
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
        raise MsprobeError(f"{where}: The SSL certificate is invalid, {cert} (with key {key}): {reason}; "
                           f"give a PEM certificate and its private key")


def _str_list(where: str, key: str, value: Any) -> Tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise MsprobeError(f"{where}: {key} must be a list type")
    if not all(isinstance(v, str) for v in value):
        raise MsprobeError(f"{where}: All elements in {key} must be string type")
    return tuple(v.strip() for v in value)


def server_config(block: dict, source: str) -> OnlineConfig:
    """The checker side: the ``run_ut`` block of config.json with ``is_online`` true."""
    where = f"config.json {source}: run_ut"
    out = _check_common(where, block, "server")
    ranks = block.get("rank_list", [0])
    if not isinstance(ranks, list):
        raise MsprobeError(f"{where}: rank_list must be a list (e.g. [0])")
    if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in ranks):
        raise MsprobeError(f"{where}: All elements in rank_list must be integers >= 0")
    edp = block.get("error_data_path", "./")
    if not isinstance(edp, str) or not edp or not os.path.isdir(edp):
        raise MsprobeError(f"{where}: error_data_path: {edp} does not exist")
    return OnlineConfig(rank_list=tuple(dict.fromkeys(ranks)) or (0,),
                        white_list=_str_list(where, "white_list", block.get("white_list")),
                        black_list=_str_list(where, "black_list", block.get("black_list")),
                        error_data_path=edp, source=source, **out)


def load_server_config(path: str) -> Optional[OnlineConfig]:
    """The online checker's config from config.json, or None when its run_ut block is not online."""
    from msprobe.core.fileio import load_json

    obj = load_json(path, "config.json (-config)")
    if not isinstance(obj, dict):
        return None
    block = obj.get("run_ut", obj.get("acc_check"))
    if not isinstance(block, dict) or not block.get("is_online"):
        return None
    if block.get("is_online") is not True:
        raise MsprobeError(f"config.json {path}: run_ut: is_online must be true or false")
    allowed = ("white_list", "black_list", "error_data_path", "precision", "is_online", "nfs_path", "host", "port",
               "rank_list", "tls_path")
    unknown = sorted(set(block) - set(allowed))
    if unknown:
        raise MsprobeError(f"config.json {path}: unknown key {unknown[0]!r} in \"run_ut\"; the keys are "
                           + ", ".join(allowed))
    return server_config(block, os.path.abspath(path))


def client_config(section: dict, fail: Callable[[str, Any, str], MsprobeError], source: str) -> Optional[OnlineConfig]:
    """The training side: the online keys of the ``tensor`` block (None when online_run_ut is off).
    ``fail(key, value, advice)`` builds the dump config's error for a bad type."""
    on = section.get("online_run_ut", False)
    if not isinstance(on, bool):
        raise fail("online_run_ut", on, "it must be true or false")
    recompute = section.get("online_run_ut_recompute", False)
    if not isinstance(recompute, bool):
        raise fail("online_run_ut_recompute", recompute, "it must be true or false")
    if not on:
        return None
    out = _check_common(f"{source}: tensor", section, "client")
    return OnlineConfig(source=source, recompute=recompute, **out)
