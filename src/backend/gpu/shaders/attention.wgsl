// Causal attention, one workgroup per (head, query row) (grid x, z), over keys in tiles of 64 with a
// running max and sum (the online softmax). Thread t scores key t of a tile; the tile's max
// and sum are read in key order by every thread; thread t owns output dims t, t + 64, ...
// Nothing depends on how many query rows the dispatch holds.

@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> kp: array<f32>;
@group(0) @binding(3) var<storage, read> vp: array<f32>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;
// The plane's pages: row t of the plane is row table[t / page_rows] * page_rows + t % page_rows
// of the pool (kv.rs).
@group(0) @binding(5) var<storage, read> table: array<u32>;

fn row(t: u32) -> u32 {
    let pr = p.b.w;
    return table[t / pr] * pr + t % pr;
}

const WG: u32 = 64u;
// Most dims per thread: head_dim <= 512 (GpuBackend::accepts refuses wider heads).
const DPT: u32 = 8u;
var<workgroup> qs: array<f32, 512>;
var<workgroup> sc: array<f32, 64>;

// p.a = (n_heads, n_kv_heads, head_dim, sinks: 1 + their first word in `table`, or 0);
// p.b = (first position, window or 0, kv width, page rows)
// p.c = (scale, softcap or 0, -, -)
@compute @workgroup_size(64)
fn attention(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let h = wg.x;
    let r = wg.z;
    let nh = p.a.x;
    let d = p.a.z;
    let kvw = p.b.z;
    let koff = (h / (nh / p.a.y)) * d;
    let pos = p.b.x + r;
    var lo = 0u;
    if (p.b.y != 0u && pos + 1u > p.b.y) {
        lo = pos + 1u - p.b.y;
    }
    let scale = bitcast<f32>(p.c.x);
    let cap = bitcast<f32>(p.c.y);
    let qb = (r * nh + h) * d;
    for (var i = t; i < d; i += WG) {
        qs[i] = q[qb + i];
    }
    workgroupBarrier();
    var acc: array<f32, DPT>;
    for (var k = 0u; k < DPT; k++) {
        acc[k] = 0.0;
    }
    var mx = LOWEST;
    var l = 0.0;
    for (var t0 = lo; t0 <= pos; t0 += WG) {
        let key = t0 + t;
        var s = LOWEST;
        if (key <= pos) {
            var dot = 0.0;
            let kb = row(key) * kvw + koff;
            for (var i = 0u; i < d; i++) {
                dot = fma(qs[i], kp[kb + i], dot);
            }
            s = dot * scale;
            if (p.c.y != 0u) {
                s = tanh_f(s / cap) * cap;
            }
        }
        sc[t] = s;
        workgroupBarrier();
        let n = min(WG, pos + 1u - t0);
        var tmax = mx;
        for (var j = 0u; j < n; j++) {
            tmax = max(tmax, sc[j]);
        }
        workgroupBarrier();
        var e = 0.0;
        if (key <= pos) {
            e = exp(s - tmax);
        }
        sc[t] = e;
        workgroupBarrier();
        let corr = exp(mx - tmax);
        var ts = 0.0;
        for (var j = 0u; j < n; j++) {
            ts = ts + sc[j];
        }
        l = l * corr + ts;
        for (var k = 0u; k < DPT; k++) {
            let dim = t + k * WG;
            if (dim < d) {
                var a = acc[k] * corr;
                for (var j = 0u; j < n; j++) {
                    a = fma(sc[j], vp[row(t0 + j) * kvw + koff + dim], a);
                }
                acc[k] = a;
            }
        }
        mx = tmax;
        workgroupBarrier();
    }
    // The head's sink logit joins the maximum and the sum, and takes no value.
    if (p.a.w != 0u) {
        let sink = bitcast<f32>(table[p.a.w - 1u + h]);
        let m2 = max(mx, sink);
        let corr = exp(mx - m2);
        l = l * corr + exp(sink - m2);
        for (var k = 0u; k < DPT; k++) {
            acc[k] = acc[k] * corr;
        }
    }
    for (var k = 0u; k < DPT; k++) {
        let dim = t + k * WG;
        if (dim < d) {
            o[qb + dim] = acc[k] / l;
        }
    }
}
