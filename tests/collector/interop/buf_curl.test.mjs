// buf curl (@bufbuild/buf), a generic Connect client, calls our collector's Push and Querier
// endpoints with our own .proto files as its schema: binary protobuf on the wire, its answers
// decoded by buf. The same calls in Connect's JSON codec (our JSON mapping) give the same
// answers field for field; profiles pushed either way hold what was sent.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { gzipSync } from 'node:zlib';
import { join } from 'node:path';
import { Function as PFunction, Line, Location, Profile, Sample, StringTable, ValueType } from 'pprof-format';
import { HERE, REPO, foldedTotal, querier, render, startCollector } from './lib.mjs';

function buf(url, path, data) {
  const out = execFileSync(join(HERE, 'node_modules', '.bin', 'buf'),
    ['curl', '--schema', join(REPO, 'proto'), '--protocol', 'connect', '--data', JSON.stringify(data),
      `${url}/${path}`], { encoding: 'utf8', timeout: 60000 });
  return JSON.parse(out);
}

// A pprof made by pprof-format (not by us): stacks {"root;...;leaf": count}.
function pprof(stacks, timeNanos) {
  const st = new StringTable();
  const fns = new Map();
  const locs = [];
  const samples = [];
  const loc = (name) => {
    if (!fns.has(name)) {
      const id = fns.size + 1;
      fns.set(name, new PFunction({ id, name: st.dedup(name), filename: st.dedup('app.py') }));
      locs.push(new Location({ id, line: [new Line({ functionId: id, line: id })] }));
    }
    return fns.get(name).id;
  };
  for (const [stack, count] of Object.entries(stacks))
    samples.push(new Sample({ locationId: stack.split(';').reverse().map(loc), value: [count] }));
  return new Profile({ sampleType: [new ValueType({ type: st.dedup('samples'), unit: st.dedup('count') })],
    sample: samples, location: locs, function: [...fns.values()], stringTable: st, timeNanos }).encode();
}

const STACKS = { 'main;work;leaf': 30, 'main;work': 7, 'main;other': 5 };

test('buf curl: Push and every querier call, binary and JSON alike', async () => {
  const col = await startCollector();
  try {
    const raw = Buffer.from(gzipSync(pprof(STACKS, BigInt(Date.now()) * 1000000n))).toString('base64');
    const push = (service) => ({ series: [{ labels: [{ name: '__name__', value: 'process_cpu' },
      { name: 'service_name', value: service }, { name: 'env', value: 'ci' }],
    samples: [{ rawProfile: raw, ID: `${service}-1` }] }] }); // an ID per profile, as clients send
    // Push through buf (binary), and through the JSON codec.
    assert.deepEqual(buf(col.url, 'push.v1.PusherService/Push', push('bufsvc')), {});
    const r = await fetch(`${col.url}/push.v1.PusherService/Push`, { method: 'POST',
      headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(push('jsonsvc')) });
    assert.equal(r.status, 200, await r.text());
    for (const svc of ['bufsvc', 'jsonsvc'])
      assert.equal(foldedTotal(await render(col.url, `${svc}.cpu`)), 42);
    // A refusal is a Connect error buf reports.
    assert.throws(() => buf(col.url, 'push.v1.PusherService/Push',
      { series: [{ labels: [{ name: '__name__', value: 'process_cpu' }], samples: [{ rawProfile: raw }] }] }),
    /invalid_argument/);

    const end = String(Date.now() + 60000);
    const sel = { profileTypeID: 'process_cpu:samples:count:cpu:nanoseconds',
      labelSelector: '{service_name="bufsvc"}', start: String(Date.now() - 3600000), end };
    const calls = {
      ProfileTypes: {},
      LabelNames: { matchers: ['{service_name="bufsvc"}'] },
      LabelValues: { name: 'service_name' },
      Series: { matchers: ['{env="ci"}'], labelNames: ['service_name', 'env'] },
      SelectMergeStacktraces: sel,
      SelectMergeProfile: sel,
      SelectSeries: { ...sel, step: 60, groupBy: ['env'] },
      Diff: { left: sel, right: { ...sel, labelSelector: '{service_name="jsonsvc"}' } },
    };
    for (const [method, req] of Object.entries(calls)) {
      const viaBuf = buf(col.url, `querier.v1.QuerierService/${method}`, req);
      const viaJson = await querier(col.url, method, req);
      assert.deepEqual(viaBuf, viaJson, method);
    }
    const fg = buf(col.url, 'querier.v1.QuerierService/SelectMergeStacktraces', sel).flamegraph;
    assert.equal(Number(fg.total), 42);
    const diff = buf(col.url, 'querier.v1.QuerierService/Diff', calls.Diff).flamegraph;
    assert.deepEqual([Number(diff.leftTicks), Number(diff.rightTicks)], [42, 42]);
  } finally {
    await col.stop();
  }
});
