// Shared by every kernel: the per-dispatch parameters and exact conversions.
//
// Each dispatch gets 16 words of parameters; each kernel says what its words mean. p.d.x is
// always the dispatch's x width, so that kernels with more than 65535 workgroups run on a 2-D
// grid: workgroup index = wg.x + wg.y * p.d.x.
struct Params {
    a: vec4<u32>,
    b: vec4<u32>,
    c: vec4<u32>,
    d: vec4<u32>,
}

@group(0) @binding(0) var<uniform> p: Params;

// The lowest finite f32: a running max starts there, and exp(LOWEST - m) is 0 for any score m.
const LOWEST: f32 = -3.4028235e38;

fn group_index(wg: vec3<u32>) -> u32 {
    return wg.x + wg.y * p.d.x;
}

// IEEE half to f32 with integer operations only, subnormals included (exact; no reliance on
// unpack2x16float, which may flush subnormals).
fn half_to_f32(h: u32) -> f32 {
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    var v: f32;
    if (e == 0u) {
        v = f32(m) * 5.9604644775390625e-8;
    } else if (e == 31u) {
        v = bitcast<f32>(0x7f800000u | (m << 13u));
    } else {
        v = bitcast<f32>(((e + 112u) << 23u) | (m << 13u));
    }
    if ((h & 0x8000u) != 0u) {
        v = -v;
    }
    return v;
}

// tanh without the overflow of (e^2x - 1) / (e^2x + 1): a series near 0 (where the quotient
// would cancel), 1 beyond 9 (tanh(9) rounds to 1 within 2^-24), the quotient of e^-2|x| between.
fn tanh_f(x: f32) -> f32 {
    let a = abs(x);
    var t: f32;
    if (a < 0.0625) {
        let x2 = a * a;
        t = a * (1.0 + x2 * (-0.33333334 + x2 * (0.13333334 + x2 * -0.053968254)));
    } else if (a > 9.0) {
        t = 1.0;
    } else {
        let e = exp(-2.0 * a);
        t = (1.0 - e) / (1.0 + e);
    }
    return select(t, -t, x < 0.0);
}
