'use strict';
// A producer for the watermark pipeline in Node.js: game events into its Redis Stream, each exactly once.
// Everything it does is in docs/wire-format.md; the section names below are that page's.
const { randomUUID } = require('node:crypto');
const { createClient, ErrorReply, ClientClosedError } = require('redis');

// "The event": its fields in the fast path's order, its kinds and its names' limits (in characters).
const FIELDS = ['event_id', 'server', 'player_id', 'kind', 'event_time', 'region'];
const KINDS = ['login', 'heartbeat', 'logout'];
const NAME_LIMITS = { server: 64, region: 64, player_id: 128, event_id: 128 };
// Unicode's categories Cc, Cf, Zl and Zp as Unicode 18 lists them (the parser's own list, not this Node's).
const INVISIBLE = new RegExp('[\\u0000-\\u001f\\u007f-\\u009f\\u00ad\\u0600-\\u0605\\u061c\\u06dd\\u070f'
  + '\\u0890\\u0891\\u08e2\\u180e\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u2064\\u2066-\\u206f\\ufeff'
  + '\\ufff9-\\ufffb\\u{110bd}\\u{110cd}\\u{13430}-\\u{1343f}\\u{1bca0}-\\u{1bca3}\\u{1d173}-\\u{1d17a}'
  + '\\u{e0001}\\u{e0020}-\\u{e007f}]', 'u');
const LONE_SURROGATE = /[\ud800-\udfff]/u; // (a pair is one code point under the u flag)
const TIME = /^[1-9]\d{3}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?Z$/;
// "Exactly once" and "Back-off".
const MARKER_TTL_S = 7 * 86_400;
const MAX_STREAM_ENTRIES = 2_000_000;
const FULL = 'command not allowed when used memory';

/** Why `value` cannot be the name in `field`; null when it can. */
function badName(field, value) {
  if (LONE_SURROGATE.test(value)) return `${field} holds a lone surrogate: not Unicode text`;
  const length = [...value].length; // code points, as the parser counts (not UTF-16 units, not bytes)
  if (length > NAME_LIMITS[field]) return `${field} is ${length} characters long, at most ${NAME_LIMITS[field]}`;
  const m = INVISIBLE.exec(value);
  const hex = m && m[0].codePointAt(0).toString(16).toUpperCase().padStart(4, '0');
  if (m) return `${field} holds U+${hex}, a control or invisible character`;
  if (value !== value.trim()) return `${field} begins or ends with a space`;
  if (field === 'server' && (value === '*' || value.startsWith('region|'))) return `server ${value} is reserved`;
  return null;
}

/** One event as the value of field `e`: checked as the parser checks it, keys in the fast path's order. */
function encodeEvent(event) {
  const fail = why => { throw new TypeError(`invalid event: ${why}`); };
  for (const key of Object.keys(event)) if (!FIELDS.includes(key)) fail(`${key} is not a field of the event`);
  const name = (field, integer) => {
    let v = event[field];
    if (integer && Number.isSafeInteger(v)) v = String(v);
    if (typeof v !== 'string' || v === '') fail(`${field} must be a non-empty string, got ${JSON.stringify(v)}`);
    const why = badName(field, v);
    if (why) fail(why);
    return v;
  };
  const doc = {};
  if (event.event_id != null) doc.event_id = name('event_id', true);
  doc.server = name('server', false);
  doc.player_id = name('player_id', true);
  if (event.kind != null) doc.kind = KINDS.includes(event.kind) ? event.kind : fail(`kind must be one of ${KINDS}`);
  let t = event.event_time;
  if (t instanceof Date && !Number.isNaN(t.getTime())) t = t.toISOString();
  if (typeof t !== 'string' || !TIME.test(t) || new Date(t).toISOString().slice(0, 19) !== t.slice(0, 19)) {
    fail(`event_time must be a Date or UTC like 2026-11-22T10:00:01.250Z, got ${JSON.stringify(t)}`);
  }
  doc.event_time = t;
  if (event.region != null) doc.region = name('region', false);
  return JSON.stringify(doc);
}

/** "Where": shard 0 is `{ns}:events`; shard k adds `:k`, inside the braces under a braced namespace. */
function inputShardKey(eventsKey, shard) {
  if (shard === 0) return eventsKey;
  const close = eventsKey.indexOf('}');
  if (!eventsKey.startsWith('{') || close <= 1) return `${eventsKey}:${shard}`;
  return `{${eventsKey.slice(1, close)}${eventsKey.slice(close + 1)}:${shard}}`;
}

/** The shard of a server: CRC-32 (zlib's; Node 20.15 has it as zlib.crc32) of its UTF-8 name, modulo the shards. */
const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  for (let k = 0; k < 8; k++) n = n & 1 ? 0xedb88320 ^ (n >>> 1) : n >>> 1;
  return n >>> 0;
});
function shardOf(server, shards) {
  if (shards <= 1) return 0;
  let c = 0xffffffff;
  for (const byte of Buffer.from(server, 'utf8')) c = CRC_TABLE[(c ^ byte) & 0xff] ^ (c >>> 8);
  return ((c ^ 0xffffffff) >>> 0) % shards;
}

/** A producer's marker: `{ns}:producer:{id}` beside an `{ns}:events` stream, else `{stream}:producer:{id}`. */
function markerKey(stream, producerId) {
  return stream.endsWith(':events') ? `${stream.slice(0, -':events'.length)}:producer:${producerId}`
    : `${stream}:producer:${producerId}`;
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

/**
 * `await producer.send(event)` buffers an event (it waits while a full batch is written); `flush()` writes what is
 * buffered; `close()` flushes and disconnects. Each batch is one MULTI/EXEC with the producer's marker, so after a
 * lost reply the marker says whether Redis has it: it is sent again only if not.
 */
class Producer {
  constructor({
    url = 'redis://127.0.0.1:6379/0', namespace = 'wm', stream, producerId = randomUUID().replaceAll('-', ''),
    batchSize = 1000, lingerMs = 5, maxStreamEntries = MAX_STREAM_ENTRIES, markerTtlS = MARKER_TTL_S,
    maxBackoffMs = 2000,
  } = {}) {
    this.stream = stream ?? `${namespace}:events`;
    this.marker = markerKey(this.stream, producerId);
    Object.assign(this, { batchSize, lingerMs, maxStreamEntries, markerTtlS, maxBackoffMs });
    this.client = createClient({ url, socket: { reconnectStrategy: n => Math.min(50 * 2 ** n, maxBackoffMs) } });
    this.client.on('error', () => {}); // a lost connection: node-redis reconnects, the batch's write settles it
    this.stats = { written: 0, batches: 0, recovered: 0, resent: 0, refusedFull: 0, heldBack: 0 };
    this.seq = 0; // this producer's batches, counted from 1: the marker holds the last one Redis has
    this.buffer = [];
    this.writes = Promise.resolve(); // batches are written one after another, in order
    this.lookedMs = -Infinity;
  }

  async connect() {
    await this.client.connect();
    return this;
  }

  async send(event) {
    this.buffer.push(encodeEvent(event));
    if (this.buffer.length >= this.batchSize) await this.flush();
    else this.timer ??= setTimeout(() => this.flush().catch(() => {}), this.lingerMs); // its error: at the next call
  }

  /** Resolves once Redis has every event sent so far; rejects, for good, if Redis refused a batch. */
  flush() {
    clearTimeout(this.timer);
    this.timer = undefined;
    while (this.buffer.length) {
      const batch = { seq: ++this.seq, payloads: this.buffer.splice(0, this.batchSize) };
      this.writes = this.writes.then(() => this.#write(batch));
    }
    return this.writes;
  }

  async close() {
    try {
      await this.flush();
    } finally {
      await this.client.close();
    }
  }

  async #write(batch) {
    let unsure = false; // the connection was lost with the batch sent: Redis may have it
    for (let pause = 100; ; pause = Math.min(2 * pause, this.maxBackoffMs)) {
      try {
        if (unsure) {
          const have = Number(await this.client.get(this.marker) ?? 0);
          if (have >= batch.seq) { this.stats.recovered++; break; } // it went in: the reply was lost, not the batch
          unsure = false;
          this.stats.resent++;
        }
        await this.#admit();
        const tx = this.client.multi();
        for (const payload of batch.payloads) tx.addCommand(['XADD', this.stream, '*', 'e', payload]);
        tx.addCommand(['SET', this.marker, String(batch.seq), 'EX', String(this.markerTtlS)]);
        await tx.exec();
        break;
      } catch (err) {
        if (err instanceof ClientClosedError) throw err;
        if (!(err instanceof ErrorReply)) unsure = true; // no answer: the connection was lost
        else if (String(err.message).includes(FULL)) this.stats.refusedFull++; // full: it ran none of the batch
        else { // Redis refused the batch: sending it again would not help
          const why = err.replies?.find(r => r instanceof ErrorReply) ?? err; // the first error inside EXEC's reply
          throw new Error(`Redis refused a batch to ${this.stream}: ${why.message}`, { cause: err });
        }
        await sleep(pause);
      }
    }
    this.stats.written += batch.payloads.length;
    this.stats.batches++;
  }

  /** Back-off: no batch while the stream holds maxStreamEntries or more (its readers are behind). */
  async #admit() {
    if (!this.maxStreamEntries || Date.now() - this.lookedMs < 100) return;
    for (let pause = 100; Number(await this.client.xLen(this.stream)) >= this.maxStreamEntries; pause *= 2) {
      this.stats.heldBack++;
      await sleep(Math.min(pause, 1000));
    }
    this.lookedMs = Date.now();
  }
}

module.exports = { Producer, encodeEvent, badName, inputShardKey, shardOf, markerKey, FIELDS, KINDS, NAME_LIMITS,
  MARKER_TTL_S, MAX_STREAM_ENTRIES };
