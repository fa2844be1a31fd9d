"""NATS URLs as they are said (logs, errors, `cluster status`): with the credentials an operator may put in one
(`nats://user:password@host:4222`, a token's `nats://token@host:4222`) replaced, the user name kept. Standard library
only: the supervisor of `serve --workers N` says its URL too."""

from __future__ import annotations


def without_credentials(urls: str) -> str:
    """`urls` (one, or several separated by commas as `cluster.nats`) with each one's password or token replaced by
    `***`: `nats://user:***@host:4222`, `nats://***@host:4222`. A URL without `scheme://` is read as its
    `host:port` part (`user:pw@host:4222` -> `user:***@host:4222`, as nats-py's `connected_url.netloc`)."""
    return ",".join(_one(u) for u in urls.split(","))


def _one(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    userinfo, at, host = rest.rpartition("@")  # the last @: a password may hold an @ or a / (unencoded)
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    shown = f"{user}:***" if colon else "***"
    return f"{scheme}{sep}{shown}@{host}"
