"""One Hypothesis example database for all shards of a campaign on a Ray cluster.

``--db redis://host:port/N`` opens Hypothesis' own ``RedisExampleDatabase`` in every shard
(each shard connects itself: a URL travels, a connection does not). Without it, the driver
serves the corpus' directory database: a small Ray actor on the driver's node owns it, and
each shard sees it as a ``ServedDatabase`` whose save, fetch and delete are calls to that
actor. Either way ``database.campaign_database`` adds the campaign's key prefix on top, as
for a local campaign. Ray is imported lazily: this module loads without it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from ..errors import InvalidArgument, TargetUnavailable

REDIS_SCHEMES = ("redis", "rediss", "unix")


def check_url(url: str) -> None:
    scheme = urlsplit(url).scheme
    if scheme not in REDIS_SCHEMES:
        raise InvalidArgument(f"--db {url!r}: not a Redis URL; give redis://HOST:PORT/DB (or rediss://, unix://), "
                              f"or leave --db out to share the corpus' database through the driver.")


def database_from_url(url: str, client_class=None) -> ExampleDatabase:
    """Hypothesis' Redis database at ``url``; ``client_class`` (default ``redis.Redis``) makes the client."""
    check_url(url)
    if client_class is None:
        try:
            import redis
        except ImportError:
            raise TargetUnavailable(f"--db {url!r} needs the redis package on every node: "
                                    f"pip install 'fuzzrunner[ray]' (or pip install redis).") from None
        client_class = redis.Redis
    from hypothesis.extra.redis import RedisExampleDatabase
    return RedisExampleDatabase(client_class.from_url(url))


def close_database(db) -> None:
    """Close a Redis database's connections (a served or directory database holds none)."""
    client = getattr(db, "redis", None)
    if client is not None:
        client.close()


class DatabaseServer:
    """The driver's directory database, owned by one actor (wrapped by ``ray.remote`` in ``serve``)."""

    def __init__(self, path: str):
        self.db = DirectoryBasedExampleDatabase(path)

    def save(self, key: bytes, value: bytes) -> None:
        self.db.save(key, value)

    def fetch(self, key: bytes) -> list:
        return list(self.db.fetch(key))

    def delete(self, key: bytes, value: bytes) -> None:
        self.db.delete(key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.db.move(src, dest, value)


class ServedDatabase(ExampleDatabase):
    """A shard's view of the driver-served database: every call goes to the server actor."""

    def __init__(self, server):
        super().__init__()
        self.server = server

    def _call(self, method: str, *args):
        import ray
        return ray.get(getattr(self.server, method).remote(*args))

    def save(self, key: bytes, value: bytes) -> None:
        self._call("save", key, value)

    def fetch(self, key: bytes):
        yield from self._call("fetch", key)

    def delete(self, key: bytes, value: bytes) -> None:
        self._call("delete", key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self._call("move", src, dest, value)

    def __repr__(self) -> str:
        return f"ServedDatabase({self.server!r})"


def serve(path: str, on_this_node):
    """Start the server actor for the directory database at ``path``, pinned to this (the driver's) node."""
    import ray
    return ray.remote(DatabaseServer).options(num_cpus=0, scheduling_strategy=on_this_node).remote(path)
