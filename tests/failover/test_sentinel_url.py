"""The ``redis+sentinel://`` address (no server): parsed in one place, built from ``REDIS_SENTINELS``, its secrets
never shown, and what redis-py is given for it."""

from __future__ import annotations

import pytest
from redis.backoff import NoBackoff
from redis.retry import Retry

from streaming.schema.config import Config, ConfigError, redact_url
from streaming.store.redis_conn import TRANSIENT
from watermark_client.connection import sentinel_client
from watermark_client.sentinel import SentinelAddress, parse_sentinel_url, sentinel_url


def test_a_sentinel_url_names_the_sentinels_the_primary_and_its_settings() -> None:
    a = parse_sentinel_url("rediss+sentinel://app:p%40ss@10.0.0.1:26380,sentinel-b,[::1]:5000/mymaster/2"
                           "?sentinel_password=s3&socket_timeout=5")
    assert a == SentinelAddress(sentinels=(("10.0.0.1", 26380), ("sentinel-b", 26379), ("::1", 5000)),
                                master="mymaster", db=2, tls=True, username="app", password="p@ss",
                                sentinel_password="s3", options=(("socket_timeout", "5"),))
    assert a.node_url() == "rediss://app:p%40ss@localhost/2?socket_timeout=5"
    assert parse_sentinel_url("redis+sentinel://h/m").sentinels == (("h", 26379),)


@pytest.mark.parametrize(("url", "says"), [
    ("redis+sentinel://h:1", "names no primary"),
    ("redis+sentinel://h:1/m/x", "must be /<master name> or /<master name>/<db number>"),
    ("redis+sentinel:///m", "names no Sentinel"),
    ("redis+sentinel://h:99999/m", "port '99999' of 'h:99999' is not a port number"),
])
def test_a_wrong_sentinel_url_stops_every_process_at_start(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match="^REDIS_URL .*" + says.replace("(", r"\(")):
        Config.from_env({"REDIS_URL": url})


def test_redis_sentinels_build_the_url_with_redis_url_s_credentials_and_tls() -> None:
    env = {"REDIS_SENTINELS": "a:26379, b:26380", "REDIS_SENTINEL_MASTER": "wm"}
    assert Config.from_env(env).redis_url == "redis+sentinel://a:26379,b:26380/wm/0"
    cfg = Config.from_env({**env, "REDIS_URL": "rediss://app:secret@ignored:6379/1?ssl_cert_reqs=none"})
    assert cfg.redis_url == "rediss+sentinel://app:secret@a:26379,b:26380/wm/1?ssl_cert_reqs=none"
    assert not cfg.embedded_redis
    assert sentinel_url("h", "m") == "redis+sentinel://h/m/0"
    with pytest.raises(ConfigError, match="REDIS_SENTINEL_MASTER must be set with REDIS_SENTINELS"):
        Config.from_env({"REDIS_SENTINELS": "a"})


def test_no_password_of_a_sentinel_url_is_shown() -> None:
    url = "redis+sentinel://app:s3cret@a:1,b:2/wm/0?sentinel_password=other&socket_timeout=3"
    shown = redact_url(url)
    assert "s3cret" not in shown and "other" not in shown
    assert shown == "redis+sentinel://app:***@a:1,b:2/wm/0?sentinel_password=***&socket_timeout=3"
    assert redact_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_the_client_asks_the_sentinels_and_connects_to_the_primary_with_its_own_settings() -> None:
    client = sentinel_client("redis+sentinel://app:pw@127.0.0.1:1,127.0.0.1:2/wm/3?sentinel_password=sp"
                             "&socket_timeout=7", socket_keepalive=True, retry=Retry(NoBackoff(), 0))
    pool = client.connection_pool
    kw = pool.connection_kwargs
    assert (pool.service_name, kw["db"], kw["username"], kw["password"], kw["socket_timeout"],
            kw["socket_keepalive"]) == ("wm", 3, "app", "pw", 7.0, True)
    asked = pool.sentinel_manager.sentinels
    assert [(s.connection_pool.connection_kwargs["port"], s.connection_pool.connection_kwargs["password"])
            for s in asked] == [(1, "sp"), (2, "sp")]
    with pytest.raises(TRANSIENT):  # no Sentinel there: MasterNotFoundError, a ConnectionError, retried
        client.ping()
    client.close()
