"""The Redis key schema: every key the pipeline writes, built and parsed in one place.

All keys start with the namespace, so several pipelines (the live one, each
replay) share one Redis without touching each other. The dashboard reads
through this module and never imports pyspark.
The keys are built by :class:`KeySchema` (``streaming.schema.namespace_keys``), the
fields that carry a server or a bound by ``streaming.schema.key_fields``; all are imported from here.

=================================================  ======  =============================================
key                                                type    contents
=================================================  ======  =============================================
``{ns}:events``                                    stream  input: one game event per entry, field ``e``
                                                           (JSON, see ``watermark_client.events``); the entry
                                                           ID's millisecond part is the ingest time. With
                                                           ``STREAM_SHARDS`` > 1 it is shard 0 and
                                                           ``{ns}:events:{i}`` shard i (``{wm:events:i}``
                                                           under a braced namespace: a slot of its own in a
                                                           Redis Cluster, decision 0018;
                                                           ``streaming.schema.shards``); the dead and late
                                                           streams likewise (``{ns}:dead:{i}``,
                                                           ``{ns}:late:{i}``, in the pipeline's slot: an
                                                           entry ID is unique only in its shard)
``{ns}:trimmed``                                   string  entries trimmed from ``{ns}:events`` so far:
                                                           with ``totals.input`` it says how many wait
                                                           (``XLEN + trimmed - input``) without a walk;
                                                           shard i counts beside its stream
                                                           (``{input shard i}:trimmed``), readers sum
``{ns}:dead``                                      stream  quarantined entries, same IDs as in
                                                           ``events``; fields ``reason``, ``detail``,
                                                           ``raw``, ``batch``
``{ns}:late``                                      stream  every event that arrived behind the watermark
                                                           (dropped or late accepted), same IDs as in
                                                           ``events``; fields ``s`` server, ``p`` player,
                                                           ``k`` kind, ``t`` event time (us), ``b`` batch,
                                                           ``w`` watermark met (``streaming.rules.late``); at
                                                           most ``LATE_EVENTS_KEEP``, ``totals.kept`` all
                                                           ever kept
``{ns}:state``                                     hash    ``last_batch`` (the commit guard),
                                                           ``delay_ms`` (the last batch ran with),
                                                           per-server mode ``max_event_us|S``,
                                                           ``watermark_ms`` (in force for last_batch),
                                                           ``next_watermark_ms`` (in force for the next
                                                           batch; windows ending at or below it are
                                                           final), ``max_event_us``, ``committed_id``,
                                                           ``params`` (JSON window/slide/delay),
                                                           ``trigger_ms``, ``updated_ms`` (commit
                                                           time), ``lost_at_batch`` (Redis came back
                                                           empty before it), ``stopped_ms`` (the job
                                                           was stopped on request then; cleared by
                                                           the next commit), ``wait_batch`` (the
                                                           batch whose commit it last waited for
                                                           replicas to have: the write ``WAIT`` waits
                                                           on, ``REDIS_WAIT_REPLICAS``),
                                                           ``lost_from_batch``, ``lost_to_batch`` (the
                                                           latest run of batches whose commits Redis
                                                           lost while keeping older ones, and that
                                                           could not be committed again; decision 0023)
``{ns}:totals``                                    hash    ``input``, ``parsed``, ``events``,
                                                           ``dropped``, ``late``, ``quarantined``, and
                                                           per server ``events|S``, ``dropped|S``,
                                                           ``late|S``, per reason ``bad|R``
``{ns}:servers``                                   set     server names seen
``{ns}:windows``                                   zset    index of windows: member
                                                           ``{start_ms}:{end_ms}:{server}``, score
                                                           ``start_ms``
``{ns}:win:{start_ms}:{end_ms}:{server}``          hash    ``events`` (accepted), ``dropped``,
                                                           ``late`` (late but accepted), ``players``
                                                           (distinct accepted players: each batch that
                                                           accepts the window adds what it added to the
                                                           window's set, ``{ns}:added:{end}``)
``{ns}:players:{start_ms}:{end_ms}:{server}``      set     every player of the window's events so far (late
                                                           ones too), written by the partitions that read
                                                           them and shared by the configured pipeline and its lanes
                                                           (decision 0019); gone once every one of them has
                                                           closed the window
``{ns}:players``                                   zset    index of those sets: member ``{start_ms}:{end_ms}:
                                                           {server}``, score ``end_ms``
``{ns}:added:{end_position}``                      hash    one batch's additions to those sets (the batch
                                                           ends at ``end_position``): ``{start_ms}:{end_ms}:
                                                           {server}`` -> how many players it added
``{ns}:added``                                     zset    index of those hashes: member ``end_position``,
                                                           score the batch's id; each goes once the pipeline
                                                           and every lane have committed its batch
``{ns}:batches``                                   zset    index of batch records, score = batch id
``{ns}:batch:{id}``                                hash    ``sink``: JSON :class:`BatchRecord` fields;
                                                           ``progress``: JSON from the query listener;
                                                           ``phases``: the sink's steps, wall ms (JSON)
``{ns}:commits``                                   stream  one entry per committed batch (``batch``),
                                                           for anyone who wants to wait on commits
``{ns}:seen``                                      hash    server -> ingest ms of its newest event
                                                           (what idleness is judged by)
``{ns}:regions``                                   hash    server -> region, as its events carry it
``{ns}:forget``                                    hash    server -> when (Redis ms) an operator asked to forget
                                                           it (``wm-control forget``: a test server); the
                                                           online view forgets it, its peaks and per-minute
                                                           series with it, once no player is kept, and
                                                           removes the field (or when it speaks again)
``{ns}:idleness``                                  stream  the job's idle decisions (``streaming.rules.fleet``):
                                                           ``server``, ``at_ms``, ``last_heard_ms``,
                                                           ``heard``, ``marker_id``, ``reason``
``{ns}:tradeoff``                                  hash    ``{server}|{bucket}`` -> (event, window)
                                                           pairs, ``grid`` (see ``streaming.rules.tradeoff``)
``{ns}:lanes``                                     hash    lab lane name -> JSON (namespace, mode,
                                                           policy, idle, ...): ``streaming.schema.config.Lane``
``{ns}:control``                                   hash    what the presenter asks for (dashboard's Lab
                                                           control, ``wm-control``):
                                                           ``scenario``, ``rate``, ``generator``
                                                           (running|stopped), ``delay_ms``, ``rev``,
                                                           ``updated_ms``; see ``streaming.apps.control``
``{ns}:control:audit``                             stream  who changed ``{ns}:control``: ``at_ms``, ``by``,
                                                           ``role``, ``change`` (JSON), ``rev``; the newest 200
``{ns}:generator``                                 hash    what the following generator applied:
                                                           ``state``, ``scenario``, ``rate``, ``rev``,
                                                           ``written``, ``since_ms``, ``updated_ms``,
                                                           ``error``
``{ns}:online:players:{server}``                   hash    players online now -> event time (us) of
                                                           their latest event (``streaming.store.online.commit``)
``{ns}:online:loggedout:{server}``                 hash    players who logged out -> the logout's event
                                                           time (us), kept until the watermark passes it
``{ns}:online:counts``                             hash    per server: how many players are online
``{ns}:online:state``                              hash    the online view's ``last_batch`` (its own
                                                           commit guard), ``watermark_ms`` (its expiries'),
                                                           ``in_force_ms``, ``batch_ts_ms``, ``timeout_ms``,
                                                           ``updated_ms``, ``max_event_us``,
                                                           ``committed_id``, ``lost_at_batch`` (Redis
                                                           came back empty before it),
                                                           ``partial_until_ms`` (rebuilt from new events
                                                           only: whole once the watermark passes it)
``{ns}:online:group:{g}-{n}``                      hash    group g of n's fold (decision 0020): its
                                                           ``last_batch`` (its own commit guard) and its
                                                           servers' ``clocks``
``{ns}:online:group:{g}-{n}:counts``               hash    per server of the group: players online after its
                                                           last commit
``{ns}:online:parts:{batch}``                      hash    group -> JSON ``OnlinePart``: what its fold did to
                                                           the batch, until every group's is in and merged
``{ns}:online:parts``                              zset    the batches with parts not merged yet, score = id
``{ns}:handoff:rows:{batch}:{g}``                  string  one group's share of a batch's accepted events
                                                           (Arrow IPC), handed off by the job; the group's
                                                           commit deletes it, or it expires after a minute
``{ns}:handoff:batches``                           stream  one entry per batch handed off (``HandoffBatch``)
``{ns}:handoff:guard``                             hash    the hand-off's guard ``last_batch``
``{ns}:online:history``                            zset    one JSON record per batch (online counts per
                                                           server after it, transitions per server and
                                                           cause), score = its batch id
``{ns}:online:commits``                            stream  one entry per batch the online view committed
                                                           (``batch``, ``end_id``), to wait on
``{ns}:online:minutes``                            zset    one JSON record per closed minute of arrival time
                                                           (``streaming.rules.online.rollup.Minute``: per server
                                                           and per region), score = the minute's first ms; the
                                                           open minute is the state's ``minute`` field
``{ns}:online:peak:{day_ms}``                      hash    the UTC day's peak online per server, region
                                                           (``region|{r}``) and ``*`` (all): ``count|at_ms``
                                                           (arrival time); kept ``HISTORY_DAYS`` after its day
``{ns}:online:peak:ever``                          hash    the highest ever, the same fields (one per server
                                                           ever seen, region, and ``*``); expires
                                                           ``HISTORY_DAYS`` + 1 days after the last minute closed
``{ns}:history:{day_ms}:{series}``                 string  players online per minute of the UTC day (arrival
                                                           time) of one series (a server, ``region|{r}`` or
                                                           ``*``): 1440 slots of 8 bytes, ``last+1``,
                                                           ``peak+1`` (uint32 LE; zero: no data), written with
                                                           SETRANGE as each minute closes
                                                           (``streaming.rules.online.rollup``); at most 11,520 bytes,
                                                           expires ``HISTORY_DAYS`` whole days after its day
``{ns}:annotations``                               zset    deploys, maintenance, incidents: JSON
                                                           ``Annotation`` (``streaming.schema.records``), score =
                                                           its start ms; those ended ``HISTORY_DAYS`` ago leave,
                                                           ``ANNOTATIONS_KEEP`` at most
``{ns}:batch_seconds``                              hash    batch durations as histogram buckets (the query
                                                           listener): ``le|{bound}`` (not cumulative),
                                                           ``count``, ``sum``; bounds
                                                           ``BATCH_SECONDS_BUCKETS``
``{ns}:alerts``                                    hash    the alerts as they stand, alert key
                                                           ``{rule}|{subject}`` -> JSON ``AlertState``
                                                           (``streaming.alerting.lifecycle``)
``{ns}:alerts:history``                            stream  every alert fired and resolved, field ``n``:
                                                           JSON ``Notice``; the newest 20,000 kept (a week
                                                           of alerts unless they flap by the thousand; the
                                                           Alerts page shows a day, time charts a week)
``{ns}:alerts:outbox``                             stream  notices the webhook has not delivered yet (field
                                                           ``n``), deleted once delivered
``{ns}:alerts:webhook``                            hash    the webhook's ``url``, ``delivered``, ``failures``,
                                                           ``last_ok_ms``, ``last_error``, ``last_error_ms``
``{ns}:alerts:delivered``                          zset    ids of the notices delivered (score: when), a
                                                           week: none is sent twice
``{ns}:alerts:monitor``                            hash    the monitor's last round ``round_ms``, its
                                                           ``interval_ms`` (is anyone evaluating) and
                                                           ``watching`` (its thresholds in one line)
``{ns}:producer:{id}``                             string  one producer's marker: the sequence number of
                                                           its last batch in ``{ns}:events`` (set in the
                                                           batch's own transaction, expires a week after;
                                                           ``watermark_client.batch_channel``)
=================================================  ======  =============================================

Every key except the input stream, the two lab hashes, ``batch_seconds`` (a counter, like ``totals`` kept whole),
the history's keys and peaks (``HISTORY_DAYS`` after their day) and the alerts' keys expires ``RETENTION`` after
its last write;
windows leave the index once they end ``RETENTION`` before the watermark, and
batch records beyond ``PROGRESS_HISTORY`` leave theirs.
"""

from __future__ import annotations

from streaming.schema.key_fields import (
    BATCH_SECONDS_BUCKETS,
    SEP,
    bucket_field,
    parse_buckets,
    parse_total_field,
    total_field,
)
from streaming.schema.namespace_keys import KeySchema, WindowKey

__all__ = ["BATCH_SECONDS_BUCKETS", "SEP", "KeySchema", "WindowKey", "bucket_field", "parse_buckets",
           "parse_total_field", "total_field"]
