// Matmul and embedding over one chunk of a weight in its stored format; LOAD_UNIT and
// UNIT_SIZE are replaced by the weight type's loader and unit (formats.wgsl).

@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> ids: array<u32>;

const WG: u32 = 64u;
// Weight rows per workgroup, and threads per weight row (LANES * ROWS_PER_GROUP = WG).
const ROWS_PER_GROUP: u32 = 8u;
const LANES: u32 = 8u;
// Batch rows one workgroup carries (grid z covers the rest).
const TM: u32 = 8u;
// [row of the group][batch row][lane]
var<workgroup> part: array<f32, 512>;

// y[m][row0 + r] = sum_k w[r][k] x[m][k]. A workgroup takes 8 weight rows and TM batch rows;
// lane l of a weight row takes units l, l + 8, ... in order, one fused multiply-add per element
// into its partial sum of each batch row; then one thread per (weight row, batch row) adds the
// 8 partials in lane order. Nothing in that order depends on the batch size, so a row's bits
// are the same whatever M is. One barrier per workgroup.
//
// p.a = (rows in the chunk, first output column of the chunk, output row stride, columns)
// p.b = (batch rows M, moved-scale word offset, -, units per row)
// p.c = (x element offset, y element offset, -, -)
@compute @workgroup_size(64)
fn matmul(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let g = t / LANES;
    let lane = t % LANES;
    let r = group_index(wg) * ROWS_PER_GROUP + g;
    let m0 = wg.z * TM;
    let mrows = min(TM, p.b.x - m0);
    var acc: array<f32, TM>;
    for (var m = 0u; m < TM; m++) {
        acc[m] = 0.0;
    }
    if (r < p.a.x) {
        for (var u = lane; u < p.b.w; u += LANES) {
            var wv: array<f32, UNIT_SIZE>;
            LOAD_UNIT(r, u, &wv);
            for (var m = 0u; m < mrows; m++) {
                let xb = p.c.x + (m0 + m) * p.a.w + u * UNIT_SIZE;
                var s = acc[m];
                for (var i = 0u; i < UNIT_SIZE; i++) {
                    s = fma(wv[i], x[xb + i], s);
                }
                acc[m] = s;
            }
        }
    }
    for (var m = 0u; m < mrows; m++) {
        part[(g * TM + m) * LANES + lane] = acc[m];
    }
    workgroupBarrier();
    let out_g = t / TM;
    let out_m = t % TM;
    let out_r = group_index(wg) * ROWS_PER_GROUP + out_g;
    if (out_r < p.a.x && out_m < mrows) {
        var s = 0.0;
        for (var l = 0u; l < LANES; l++) {
            s = s + part[(out_g * TM + out_m) * LANES + l];
        }
        y[p.c.y + (m0 + out_m) * p.a.z + p.a.y + out_r] = s;
    }
}

// Row i of y = table row ids[i] (when that row is in this chunk), times a scale when p.c.w = 1
// (mode 0); or the Gemma4 per-layer combine y = (y + row * p.c.y) * p.c.z (mode 1).
// p.a = (rows in the chunk, first table row of the chunk, -, columns)
// p.b = (tokens, moved-scale word offset, -, units per row); p.c = (mode, scale, combine, has scale)
@compute @workgroup_size(64)
fn embed(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = group_index(wg);
    if (i >= p.b.x) {
        return;
    }
    let tok = ids[i];
    if (tok < p.a.y || tok - p.a.y >= p.a.x) {
        return;
    }
    let r = tok - p.a.y;
    let scale = bitcast<f32>(p.c.y);
    for (var u = t; u < p.b.w; u += WG) {
        var wv: array<f32, UNIT_SIZE>;
        LOAD_UNIT(r, u, &wv);
        for (var k = 0u; k < UNIT_SIZE; k++) {
            let o = i * p.a.w + u * UNIT_SIZE + k;
            let v = wv[k];
            if (p.c.x == 0u) {
                y[o] = select(v, v * scale, p.c.w == 1u);
            } else {
                y[o] = (y[o] + v * scale) * bitcast<f32>(p.c.z);
            }
        }
    }
}
