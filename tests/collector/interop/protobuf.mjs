// protobuf.mjs - the little protobuf these tests write and read by hand: a request of string
// fields (a querier call in binary), and the pprof profiles inside a Pyroscope PushRequest, to
// hand them to the independent pprof readers.

// A message of length-delimited string fields: [[number, string], ...] (each under 128 bytes).
export function stringFields(fields) {
  const out = [];
  for (const [num, s] of fields) {
    const b = Buffer.from(s);
    if (b.length >= 128) throw new Error('a field too long for this helper');
    out.push((num << 3) | 2, b.length, ...b);
  }
  return new Uint8Array(out);
}

// The raw_profile fields (2 > 1) of every series (1) of a PushRequest: protobuf read by hand
// only to reach the pprof that pprof-format decodes.
export function pushProfiles(b) {
  const out = [];
  const fields = (buf, fn) => {
    let i = 0;
    const varint = () => {
      let v = 0, m = 1;
      for (;;) { const c = buf[i++]; v += (c & 0x7f) * m; m *= 128; if (c < 0x80) return v; }
    };
    while (i < buf.length) {
      const tag = varint();
      if ((tag & 7) === 2) { const n = varint(); fn(tag >> 3, buf.subarray(i, i + n)); i += n; }
      else if ((tag & 7) === 0) varint();
      else throw new Error('unexpected wire type');
    }
  };
  fields(b, (f, series) => f === 1 && fields(series, (g, sample) => g === 2 &&
    fields(sample, (h, raw) => h === 1 && out.push(raw))));
  return out;
}
