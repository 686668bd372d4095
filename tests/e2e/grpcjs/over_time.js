// A grpc-js client of the shipped epochstate.proto, loaded at run time by
// @grpc/proto-loader (no generated code): Get pinned to an epoch and by as_of_time,
// History over a range and up to the newest epoch, and the Changes stream with its
// end-of-epoch markers; a bad range's reason is read from the status details.
//
// Reads a JSON request on standard input (see tests/sources/test_grpcjs.py) and
// prints every answer as JSON: messages as proto-loader gives them (field names as in
// the .proto, 64-bit integers as strings, bytes as base64), so Python can parse them
// back into the same messages.
"use strict";

const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");
const protobuf = require(require.resolve("protobufjs", { paths: [require.resolve("@grpc/proto-loader")] }));

const OBJECTS = { keepCase: true, longs: String, enums: String, bytes: String, defaults: false, json: true };
const SECONDS = 10;

// The status details the daemon sends (grpc-status-details-bin): a google.rpc.Status
// holding a google.rpc.ErrorInfo. These messages are wire-compatible stand-ins for
// Google's (Any as its two fields), so no other .proto is needed.
const rpc = protobuf.parse(
  `syntax = "proto3";
   message Any { string type_url = 1; bytes value = 2; }
   message Status { int32 code = 1; string message = 2; repeated Any details = 3; }
   message ErrorInfo { string reason = 1; string domain = 2; map<string, string> metadata = 3; }`,
  { keepCase: true },
).root;

function deadline() {
  return { deadline: Date.now() + SECONDS * 1000 };
}

function failure(error) {
  const found = { code: error.code, reason: "" };
  const [details] = error.metadata ? error.metadata.get("grpc-status-details-bin") : [];
  if (details) {
    const status = rpc.lookupType("Status").decode(details);
    const info = status.details.find((d) => d.type_url.endsWith("/google.rpc.ErrorInfo"));
    if (info) found.reason = rpc.lookupType("ErrorInfo").decode(info.value).reason;
  }
  return found;
}

function unary(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, deadline(), (error, response) => (error ? reject(error) : resolve(response)));
  });
}

async function stream(client, method, request) {
  const messages = [];
  try {
    for await (const message of client[method](request, deadline())) messages.push(message);
    return { messages, code: 0, reason: "" };
  } catch (error) {
    return { messages, ...failure(error) };
  }
}

async function main(ask) {
  const definition = protoLoader.loadSync(ask.proto, OBJECTS);
  const { EpochState } = grpc.loadPackageDefinition(definition).epochstate.v1;
  const client = new EpochState(ask.target, grpc.credentials.createInsecure());
  const store = { job: ask.job };
  const answers = { get: [], history: [] };
  for (const key of ask.keys) {
    answers.get.push(await unary(client, "Get", { store, key, epoch: { exact: ask.epoch } }));
    const range = { store, key, from_epoch: ask.from_epoch, to_epoch: ask.to_epoch };
    answers.history.push(await unary(client, "History", range));
  }
  const [first] = ask.keys;
  answers.as_of_time = await unary(client, "Get", { store, key: first, epoch: { as_of_time: ask.as_of_time } });
  answers.history_latest = await unary(client, "History", { store, key: first, from_epoch: ask.from_epoch });
  const range = { store, from_epoch: ask.from_epoch, to_epoch: ask.to_epoch, limit: ask.limit };
  answers.changes = await stream(client, "Changes", range);
  answers.bad_range = await stream(client, "Changes", { store, from_epoch: 2, to_epoch: 1 });
  client.close();
  return answers;
}

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  main(JSON.parse(input)).then(
    (answers) => process.stdout.write(JSON.stringify(answers)),
    (error) => {
      process.stderr.write(`${error.stack || error}\n${JSON.stringify(error.code === undefined ? "" : failure(error))}\n`);
      process.exit(1);
    },
  );
});
