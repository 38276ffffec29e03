// Row and element operations on activations. Bindings: src (read), aux (read: a norm weight,
// a bias, the up projection, a rope table), dst (read-write), idx (read: row indices).

@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read> aux: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;
@group(0) @binding(4) var<storage, read> idx: array<u32>;

const WG: u32 = 64u;
var<workgroup> red: array<f32, 64>;

fn element(wg: vec3<u32>, t: u32) -> u32 {
    return group_index(wg) * WG + t;
}

// Sum of `v` over the workgroup in a fixed tree; every thread gets the total.
fn workgroup_sum(t: u32, v: f32) -> f32 {
    red[t] = v;
    workgroupBarrier();
    for (var half = WG / 2u; half > 0u; half >>= 1u) {
        if (t < half) {
            red[t] = red[t] + red[t + half];
        }
        workgroupBarrier();
    }
    let total = red[0];
    workgroupBarrier();
    return total;
}

// 1 / sqrt(mean + eps) of a row, from each thread's partial sum of squares (p.a.y = width,
// p.a.z = eps).
fn rms_scale(t: u32, partial: f32) -> f32 {
    return 1.0 / sqrt(workgroup_sum(t, partial) / f32(p.a.y) + bitcast<f32>(p.a.z));
}

// dst row = aux * (src row * 1 / sqrt(mean(src^2) + eps)), one workgroup per row.
// p.a = (rows, width, eps, -)
@compute @workgroup_size(64)
fn rms_norm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r = group_index(wg);
    let live = r < p.a.x;
    let width = p.a.y;
    let base = r * width;
    var s = 0.0;
    if (live) {
        for (var k = t; k < width; k += WG) {
            let v = src[base + k];
            s = fma(v, v, s);
        }
    }
    let inv = rms_scale(t, s);
    if (live) {
        for (var k = t; k < width; k += WG) {
            dst[base + k] = aux[k] * (src[base + k] * inv);
        }
    }
}

// As rms_norm in place on dst; without the weight when p.a.w = 0 (v-norm). The weight is
// `width` wide, so that head norms run as rows of head_dim.
@compute @workgroup_size(64)
fn rms_norm_inplace(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r = group_index(wg);
    let live = r < p.a.x;
    let width = p.a.y;
    let base = r * width;
    var s = 0.0;
    if (live) {
        for (var k = t; k < width; k += WG) {
            let v = dst[base + k];
            s = fma(v, v, s);
        }
    }
    let inv = rms_scale(t, s);
    if (live) {
        for (var k = t; k < width; k += WG) {
            if (p.a.w == 1u) {
                dst[base + k] = aux[k] * (dst[base + k] * inv);
            } else {
                dst[base + k] = dst[base + k] * inv;
            }
        }
    }
}

// dst[i] += src[i]. p.a = (len, -, -, -)
@compute @workgroup_size(64)
fn add(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = element(wg, t);
    if (i < p.a.x) {
        dst[i] = dst[i] + src[i];
    }
}

// dst[i] += aux[i % width]. p.a = (len, width, -, -)
@compute @workgroup_size(64)
fn add_bias(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = element(wg, t);
    if (i < p.a.x) {
        dst[i] = dst[i] + aux[i % p.a.y];
    }
}

// dst[i] *= s (p.a.y = 0), or dst[i] = tanh(dst[i] / s) * s (p.a.y = 1). p.a = (len, mode, s, -)
@compute @workgroup_size(64)
fn scale(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = element(wg, t);
    if (i < p.a.x) {
        let s = bitcast<f32>(p.a.z);
        if (p.a.y == 0u) {
            dst[i] = dst[i] * s;
        } else {
            dst[i] = tanh_f(dst[i] / s) * s;
        }
    }
}

// dst = act(dst) * src: SiLU (p.a.y = 0), gelu_pytorch_tanh (1), or the clamped SwiGLU (2:
// (clamp(src, -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(dst, limit)).
// p.a = (len, act, alpha, limit)
@compute @workgroup_size(64)
fn gated(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = element(wg, t);
    if (i < p.a.x) {
        let g = dst[i];
        if (p.a.y == 0u) {
            dst[i] = (g / (1.0 + exp(-g))) * src[i];
        } else if (p.a.y == 2u) {
            let alpha = bitcast<f32>(p.a.z);
            let limit = bitcast<f32>(p.a.w);
            let c = min(g, limit);
            let u = clamp(src[i], -limit, limit);
            dst[i] = (u + 1.0) * (c * (1.0 / (1.0 + exp(-(c * alpha)))));
        } else {
            dst[i] = 0.5 * g * (1.0 + tanh_f(0.7978846 * (g + 0.044715 * g * g * g))) * src[i];
        }
    }
}

// dst[r][c] = src[idx[r]][c] (p.a.w = 1), or src[r][offset + c] of rows src_width wide (0).
// p.a = (rows, width, src width, gather by index); p.b.x = offset
@compute @workgroup_size(64)
fn gather(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = element(wg, t);
    let width = p.a.y;
    if (i < p.a.x * width) {
        let r = i / width;
        let c = i % width;
        if (p.a.w == 1u) {
            dst[i] = src[idx[r] * width + c];
        } else {
            dst[i] = src[r * p.a.z + p.b.x + c];
        }
    }
}

// Rotary embedding of every head of every row, from a table of (cos, sin) per (row, pair)
// made on the host in f64 as semantics::rope::apply_rope does.
// p.a = (rows, width, head_dim, pairs per head); one thread per (row, head, pair)
@compute @workgroup_size(64)
fn rope(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = element(wg, t);
    let pairs = p.a.w;
    let heads = p.a.y / p.a.z;
    if (i < p.a.x * heads * pairs) {
        let r = i / (heads * pairs);
        let h = (i / pairs) % heads;
        let j = i % pairs;
        let base = r * p.a.y + h * p.a.z;
        let c = aux[(r * pairs + j) * 2u];
        let s = aux[(r * pairs + j) * 2u + 1u];
        let x0 = dst[base + j];
        let x1 = dst[base + j + pairs];
        dst[base + j] = x0 * c - x1 * s;
        dst[base + j + pairs] = x1 * c + x0 * s;
    }
}
