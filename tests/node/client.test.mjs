// A driver in another language: drives the execpods sidecar from Node.js over the contract alone.
//
//   node client.test.mjs 127.0.0.1:50551        (or EXECPODS_SIDECAR=127.0.0.1:50551 node ...)
//
// It loads proto/execpods/v1/allocator.proto at run time with @grpc/proto-loader (no generated
// code), calls RequestTotal, KillExecutors (including a misspelt id: INVALID_ARGUMENT) and
// UpdateDriverExecutors, and follows StreamSnapshots, rebuilding full snapshots from the deltas
// exactly as the Python client does. It expects a sidecar with no executors yet on a cluster that
// starts pods by itself, prints every check, and exits non-zero on the first failure. At the end it
// has killed every executor it asked for, so the sidecar can be stopped with no pods left.
// It also resumes a stream across a forced disconnect (a TCP proxy it cuts): the removal decided
// while it was cut off arrives exactly once on the stream reopened with `resume_from`.

import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";

import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const PROTO_ROOT = path.resolve(HERE, "..", "..", "proto");
const WANTED = 3;
const WAIT_MS = 20_000;
const OVERALL_MS = 50_000;

// --- the rebuilder: the same rules as execpods.client.SnapshotRebuilder ----------------------

/**
 * The executor id of a map key. protobufjs (under proto-loader) keeps 64-bit map keys in its
 * internal "long hash" form, 8 characters holding the little-endian bytes, whatever the `longs`
 * option says; other runtimes give decimal strings. Both are read here.
 */
export function executorIdOfKey(key) {
  if (/^-?[0-9]+$/.test(key)) return Number(key);
  if (key.length !== 8) throw new Error(`unexpected int64 map key ${JSON.stringify(key)}`);
  const byte = (i) => key.charCodeAt(i);
  const low = (byte(0) | (byte(1) << 8) | (byte(2) << 16) | (byte(3) << 24)) >>> 0;
  const high = (byte(4) | (byte(5) << 8) | (byte(6) << 16) | (byte(7) << 24)) | 0;
  return high * 2 ** 32 + low;
}

/** Rebuilds complete snapshots (Map id -> state) from one stream's full and delta messages. */
export class SnapshotRebuilder {
  constructor() {
    this.current = null; // { executors: Map<number, object>, fullSnapshotTsMs, wasFull }
  }

  applySnapshot(message) {
    const changed = new Map(
      Object.entries(message.executor_pods).map(([key, state]) => [executorIdOfKey(key), state]),
    );
    let executors;
    if (message.full) {
      executors = changed; // a full snapshot replaces: executors it lacks are gone
    } else if (this.current === null) {
      throw new Error("a delta snapshot arrived before any full one");
    } else {
      // A delta holds only the executors that changed; every other one keeps its state.
      executors = new Map([...this.current.executors, ...changed]);
    }
    this.current = {
      executors,
      fullSnapshotTsMs: Number(message.full_snapshot_ts_ms),
      wasFull: message.full,
    };
    return this.current;
  }

  /** One stream message: its snapshots rebuilt in order, and its removals. */
  apply(message) {
    return {
      snapshots: message.snapshots.map((s) => this.applySnapshot(s)),
      removed: message.removed_executors,
    };
  }
}

const idsIn = (snapshot, state) =>
  [...snapshot.executors].filter(([, s]) => s.state === state).map(([id]) => id).sort((a, b) => a - b);

// --- checks and waits -----------------------------------------------------------------------

let checks = 0;

function check(condition, what, detail = "") {
  if (!condition) {
    throw new Error(`check failed: ${what}${detail ? ` (${detail})` : ""}`);
  }
  checks += 1;
  console.log(`ok ${checks} - ${what}`);
}

function unary(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, { deadline: Date.now() + 10_000 }, (error, response) =>
      error ? reject(error) : resolve(response),
    );
  });
}

async function expectCode(promise, code, what) {
  try {
    const response = await promise;
    check(false, what, `succeeded with ${JSON.stringify(response)}`);
  } catch (error) {
    if (error.message?.startsWith("check failed")) throw error;
    check(error.code === code, what, `got ${grpc.status[error.code]}: ${error.details}`);
  }
}

/** A followed stream: rebuilt state, every removal, and waits on conditions over them. */
class FollowedStream {
  constructor(call) {
    this.call = call;
    this.rebuilder = new SnapshotRebuilder();
    this.messages = [];
    this.removed = [];
    this.error = null;
    this.waiters = new Set();
    call.on("data", (message) => {
      try {
        const update = this.rebuilder.apply(message);
        this.messages.push(message);
        this.removed.push(...update.removed);
      } catch (error) {
        this.error = error;
      }
      this.poke();
    });
    call.on("error", (error) => {
      if (error.code !== grpc.status.CANCELLED) this.error = error;
      this.poke();
    });
  }

  poke() {
    for (const waiter of this.waiters) waiter();
  }

  /** Resolves once `predicate()` holds (checked after every message); rejects after WAIT_MS. */
  until(predicate, what) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        reject(new Error(`timed out after ${WAIT_MS} ms waiting for ${what}`));
      }, WAIT_MS);
      const waiter = () => {
        if (this.error) {
          clearTimeout(timer);
          this.waiters.delete(waiter);
          reject(this.error);
        } else if (this.rebuilder.current && predicate(this.rebuilder.current)) {
          clearTimeout(timer);
          this.waiters.delete(waiter);
          resolve(this.rebuilder.current);
        }
      };
      this.waiters.add(waiter);
      waiter();
    });
  }

  cancel() {
    this.call.cancel();
  }
}

// --- credentials -----------------------------------------------------------------------------

/**
 * TLS when EXECPODS_CA_FILE names the CA that signed the sidecar's certificate, and a bearer token
 * on every call when EXECPODS_TOKEN_FILE names a file holding it (read from a file, as a driver
 * should, never from the command line). Plaintext without either.
 */
function credentialsFromEnvironment({ withToken = true } = {}) {
  const caFile = process.env.EXECPODS_CA_FILE;
  const tokenFile = process.env.EXECPODS_TOKEN_FILE;
  if (!caFile) return grpc.credentials.createInsecure();
  const tls = grpc.credentials.createSsl(fs.readFileSync(caFile));
  if (!tokenFile || !withToken) return tls;
  const token = fs.readFileSync(tokenFile, "utf8").trim();
  const bearer = grpc.credentials.createFromMetadataGenerator((_params, callback) => {
    const metadata = new grpc.Metadata();
    metadata.add("authorization", `Bearer ${token}`);
    callback(null, metadata);
  });
  return grpc.credentials.combineChannelCredentials(tls, bearer);
}

/** A TCP proxy to the sidecar that the test can cut (every connection dropped, port closed). */
class CuttableProxy {
  constructor(upstream) {
    const at = upstream.lastIndexOf(":");
    this.host = upstream.slice(0, at);
    this.upstreamPort = Number(upstream.slice(at + 1));
    this.sockets = new Set();
    this.port = 0;
  }

  async listen() {
    this.server = net.createServer((inbound) => {
      const outbound = net.connect(this.upstreamPort, this.host);
      for (const socket of [inbound, outbound]) {
        this.sockets.add(socket);
        socket.on("close", () => this.sockets.delete(socket));
        socket.on("error", () => socket.destroy());
      }
      inbound.pipe(outbound);
      outbound.pipe(inbound);
    });
    await new Promise((resolve) => this.server.listen(this.port, "127.0.0.1", resolve));
    this.port = this.server.address().port;
    return `127.0.0.1:${this.port}`;
  }

  async cut() {
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

/** A stream through a proxy is cut while an executor is killed; the resumed stream gets its
 * removal exactly once, and the current snapshot in full. */
async function resumeAcrossDisconnect(v1, direct, address) {
  if (address.startsWith("unix:")) {
    check(true, "the disconnect scenario needs a TCP address; skipped on a Unix socket");
    return;
  }
  const proxy = new CuttableProxy(address);
  const through = await proxy.listen();
  const driver = new v1.ExecutorAllocator(through, credentialsFromEnvironment());
  const cutOff = new FollowedStream(driver.StreamSnapshots({ batch_interval_ms: 50 }));
  const up = await cutOff.until(
    (s) => idsIn(s, "STATE_RUNNING").length === WANTED,
    `${WANTED} running executors through the proxy`,
  );
  const last = cutOff.messages.at(-1).position;
  check(last.incarnation !== "", `every message carries a position (${last.incarnation}:${last.sequence})`);
  const ended = new Promise((resolve) => cutOff.call.on("error", resolve));
  await proxy.cut();
  const error = await ended;
  check(error.code === grpc.status.UNAVAILABLE, "cutting the network ends the stream: UNAVAILABLE");

  const victim = idsIn(up, "STATE_RUNNING")[0];
  const watcher = new FollowedStream(direct.StreamSnapshots({ batch_interval_ms: 50 }));
  const killed = await unary(direct, "KillExecutors", { executor_ids: [String(victim)] });
  check(killed.deleted_pods === 1, `executor ${victim} killed while the driver is cut off`);
  await watcher.until(
    () => watcher.removed.some((r) => Number(r.executor_id) === victim),
    `the sidecar to decide executor ${victim}'s removal`,
  );
  watcher.cancel();

  await proxy.listen(); // the network is back, on the same port
  const resumed = new FollowedStream(
    driver.StreamSnapshots({ batch_interval_ms: 50, resume_from: last }),
  );
  await resumed.until(
    () => resumed.removed.some((r) => Number(r.executor_id) === victim),
    `the missed removal of executor ${victim}`,
  );
  const opening = resumed.messages[0];
  check(opening.snapshots.length === 1 && opening.snapshots[0].full, "the resumed stream opens with a full snapshot");
  check(!resumed.messages.some((m) => m.resync), "a resume within the window needs no re-sync");
  const seen = resumed.removed.filter((r) => Number(r.executor_id) === victim).length;
  check(seen === 1, `the missed removal of executor ${victim} arrives exactly once`, `${seen} times`);
  resumed.cancel();
  driver.close();
  await proxy.cut();
}

// --- the scenario ---------------------------------------------------------------------------

async function run(address) {
  const definition = protoLoader.loadSync("execpods/v1/allocator.proto", {
    includeDirs: [PROTO_ROOT],
    keepCase: true, // field names as the .proto spells them
    longs: Number, // int64 ids and millisecond timestamps fit a double
    enums: String, // "STATE_RUNNING"
    defaults: true, // absent scalars read as their defaults, as in every proto3 runtime
  });
  const v1 = grpc.loadPackageDefinition(definition).execpods.v1;
  const client = new v1.ExecutorAllocator(address, credentialsFromEnvironment());
  await new Promise((resolve, reject) =>
    client.waitForReady(Date.now() + 10_000, (error) => (error ? reject(error) : resolve())),
  );
  const secured = Boolean(process.env.EXECPODS_CA_FILE);
  check(true, `connected to ${address}${secured ? " over TLS" : ""}`);
  if (secured && process.env.EXECPODS_TOKEN_FILE) {
    const anonymous = new v1.ExecutorAllocator(
      address,
      credentialsFromEnvironment({ withToken: false }),
    );
    await expectCode(
      unary(anonymous, "RequestTotal", { total: 0 }),
      grpc.status.UNAUTHENTICATED,
      "a call over TLS without the bearer token is UNAUTHENTICATED",
    );
    anonymous.close();
  }

  const follow = (batchIntervalMs) =>
    new FollowedStream(client.StreamSnapshots({ batch_interval_ms: batchIntervalMs }));
  const stream = follow(50);
  await stream.until(() => true, "the first message");
  const first = stream.messages[0];
  check(
    first.snapshots.length === 1 && first.snapshots[0].full,
    "the stream's first message holds exactly one snapshot, in full",
  );

  await expectCode(
    new Promise((resolve, reject) => {
      const bad = client.StreamSnapshots({ batch_interval_ms: -1 });
      bad.on("data", resolve);
      bad.on("error", reject);
    }),
    grpc.status.INVALID_ARGUMENT,
    "StreamSnapshots with a negative interval is INVALID_ARGUMENT",
  );
  await expectCode(
    unary(client, "RequestTotal", { total: -1 }),
    grpc.status.INVALID_ARGUMENT,
    "RequestTotal(-1) is INVALID_ARGUMENT",
  );

  const asked = await unary(client, "RequestTotal", { total: WANTED });
  check(asked.total === WANTED, `RequestTotal(${WANTED}) puts the target in force`, JSON.stringify(asked));
  const up = await stream.until(
    (s) => idsIn(s, "STATE_RUNNING").length === WANTED,
    `${WANTED} running executors`,
  );
  const running = idsIn(up, "STATE_RUNNING");
  check(true, `the rebuilt snapshots reach ${WANTED} running executors: ${running}`);
  check(
    stream.messages.slice(1).some((m) => m.snapshots.some((s) => !s.full)),
    "later snapshots arrived as deltas and were rebuilt",
  );

  // A second stream starts from a full snapshot of the same state: the deltas were rebuilt right.
  const fresh = follow(50);
  const other = await fresh.until(
    (s) => idsIn(s, "STATE_RUNNING").length === WANTED,
    "a second stream to show the same running executors",
  );
  fresh.cancel();
  const podsOf = (s) =>
    JSON.stringify([...s.executors].sort(([a], [b]) => a - b).map(([id, e]) => [id, e.state, e.pod_name]));
  check(
    podsOf(other) === podsOf(stream.rebuilder.current),
    "a fresh full snapshot equals the snapshot rebuilt from deltas",
    `${podsOf(other)} vs ${podsOf(stream.rebuilder.current)}`,
  );
  const pod = other.executors.get(running[0]);
  check(pod.pod_name !== "" && pod.phase === "Running", "executor states carry the pod's name and phase");

  await expectCode(
    unary(client, "KillExecutors", { executor_ids: [String(running[0]), "seven"] }),
    grpc.status.INVALID_ARGUMENT,
    'KillExecutors(["<id>", "seven"]) is INVALID_ARGUMENT',
  );
  const again = await unary(client, "RequestTotal", { total: WANTED });
  check(again.running === WANTED, "the misspelt kill deleted nothing", JSON.stringify(again));

  const victim = running[0];
  const killed = await unary(client, "KillExecutors", { executor_ids: [String(victim)] });
  check(killed.deleted_pods === 1, `KillExecutors(["${victim}"]) deletes one pod`, JSON.stringify(killed));
  await stream.until(
    () => stream.removed.some((r) => Number(r.executor_id) === victim),
    `the removal of executor ${victim} on the stream`,
  );
  const removal = stream.removed.find((r) => Number(r.executor_id) === victim);
  check(!removal.exit_caused_by_app, `executor ${victim}'s removal is reported, not caused by the app`);
  const replaced = await stream.until(
    (s) => idsIn(s, "STATE_RUNNING").length === WANTED && !idsIn(s, "STATE_RUNNING").includes(victim),
    "a replacement executor",
  );
  check(true, `the allocator replaced executor ${victim}: ${idsIn(replaced, "STATE_RUNNING")}`);

  await resumeAcrossDisconnect(v1, client, address);
  await stream.until(
    (s) => idsIn(s, "STATE_RUNNING").length === WANTED,
    "the executor killed while cut off to be replaced",
  );

  const known = await unary(client, "UpdateDriverExecutors", {});
  check(Array.isArray(known.known), `UpdateDriverExecutors answers the known executors: ${known.known}`);

  // Scale down as a driver does: target 0, then kill the executors it no longer needs.
  const zero = await unary(client, "RequestTotal", { total: 0 });
  check(zero.total === 0, "RequestTotal(0) puts the target in force");
  const remaining = idsIn(stream.rebuilder.current, "STATE_RUNNING");
  const last = await unary(client, "KillExecutors", { executor_ids: remaining.map(String) });
  check(last.deleted_pods === remaining.length, `KillExecutors(${remaining}) deletes them all`);
  await stream.until(
    (s) =>
      idsIn(s, "STATE_RUNNING").length === 0 &&
      idsIn(s, "STATE_PENDING").length === 0 &&
      remaining.every((id) => stream.removed.some((r) => Number(r.executor_id) === id)),
    "every executor removed",
  );
  check(true, "no executor is running or pending, and every kill was reported as a removal");
  stream.cancel();
  client.close();
}

const address = process.argv[2] ?? process.env.EXECPODS_SIDECAR;
if (!address) {
  console.error("usage: node client.test.mjs <host:port | unix:/path>  (or EXECPODS_SIDECAR)");
  process.exit(2);
}
const overall = setTimeout(() => {
  console.error(`not ok - the test did not finish within ${OVERALL_MS} ms`);
  process.exit(1);
}, OVERALL_MS);
try {
  await run(address);
  clearTimeout(overall);
  console.log(`all ${checks} checks passed`);
  process.exit(0);
} catch (error) {
  console.error(`not ok - ${error.stack ?? error}`);
  process.exit(1);
}
