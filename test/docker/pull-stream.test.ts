/** The pull's JSON progress stream folded into bytes (src/docker/pull-stream.ts): docker's own lines. */
import t from "tap";
import { foldPullLine, pullBytes, type PullState } from "../../src/docker/pull-stream.ts";

// As dockerd 28 streams a pull of two layers, one already present (abridged).
const STREAM = [
  '{"status":"Pulling from library/app","id":"1"}',
  '{"status":"Pulling fs layer","progressDetail":{},"id":"aaa"}',
  '{"status":"Already exists","progressDetail":{},"id":"ccc"}',
  '{"status":"Pulling fs layer","progressDetail":{},"id":"bbb"}',
  '{"status":"Downloading","progressDetail":{"current":1000,"total":4000},"progress":"[=> ]","id":"aaa"}',
  '{"status":"Downloading","progressDetail":{"current":500,"total":1000},"progress":"[=> ]","id":"bbb"}',
  '{"status":"Downloading","progressDetail":{"current":3000,"total":4000},"progress":"[==> ]","id":"aaa"}',
  '{"status":"Verifying Checksum","progressDetail":{},"id":"bbb"}',
  '{"status":"Download complete","progressDetail":{},"id":"bbb"}',
  '{"status":"Extracting","progressDetail":{"current":1000,"total":1000},"id":"bbb"}',
];

t.test("each layer's download counts once, a completed one all done; extraction adds nothing", async (t) => {
  const state: PullState = { layers: new Map() };
  const seen = STREAM.map((line) => (foldPullLine(state, line), pullBytes(state)));
  t.same(seen[4], { done: 1000, total: 4000 });
  t.same(seen[6], { done: 3500, total: 5000 });
  t.same(seen.at(-1), { done: 4000, total: 5000 });
  t.equal(state.error, undefined);
});

t.test("an error message is kept, with its detail", async (t) => {
  const state: PullState = { layers: new Map() };
  foldPullLine(state, '{"errorDetail":{"message":"manifest unknown"},"error":"manifest unknown (short)"}');
  t.equal(state.error, "manifest unknown");
});

t.test("odd lines are skipped: not JSON, not an object, figures that are not counts", async (t) => {
  const state: PullState = { layers: new Map() };
  for (const line of [
    "not json",
    "[1,2]",
    "null",
    '{"status":"Downloading","progressDetail":{"current":"5","total":10},"id":"a"}',
    '{"status":"Downloading","progressDetail":{"current":-1,"total":10},"id":"a"}',
    '{"status":"Downloading","progressDetail":{"current":5,"total":0},"id":"a"}',
    '{"status":"Downloading","progressDetail":{"current":5,"total":10},"id":7}',
    '{"status":"Download complete","id":"never-started"}',
  ])
    foldPullLine(state, line);
  t.same(pullBytes(state), { done: 0, total: 0 });
  foldPullLine(state, '{"status":"Downloading","progressDetail":{"current":50,"total":10},"id":"a"}');
  t.same(pullBytes(state), { done: 10, total: 10 }, "a current beyond its total is the total");
});
