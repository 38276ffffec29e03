// One loader per weight type: `load_<type>(r, u, &out)` writes unit `u` of row `r` of the
// bound chunk as f32, with the arithmetic of src/quant/dequant.rs (ggml's reference
// dequantization). A unit is 32 elements for the block formats (a K-quant super-block is 8
// units) and 1 element for the float types.
//
// The chunk layout (src/backend/gpu/weights.rs): the rows' blocks as stored, except that a
// block's 2-byte f16 scale is moved to a separate run of halves at word p.b.y when the block is
// not a whole number of words (Q8_0, Q4_0, Q5_0, Q6_K), and MXFP4's 1-byte E8M0 scale to a run
// of bytes there; p.a.w = columns, p.b.w = units per row.
@group(0) @binding(1) var<storage, read> w: array<u32>;

fn w_byte(word0: u32, i: u32) -> u32 {
    return (w[word0 + (i >> 2u)] >> ((i & 3u) * 8u)) & 0xffu;
}

fn w_half(i: u32) -> u32 {
    return (w[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu;
}

fn moved_scale(g: u32) -> f32 {
    return half_to_f32(w_half(p.b.y * 2u + g));
}

// Half of block g's moved E8M0 scale e, 2^(e - 127) / 2, built from its bits as ggml-impl.h's
// ggml_e8m0_to_fp32_half does: exponent field e - 1, or for e < 2 the subnormal 0x00200000 << e.
fn moved_scale_e8m0_half(g: u32) -> f32 {
    let e = w_byte(p.b.y, g);
    return bitcast<f32>(select((e - 1u) << 23u, 0x00200000u << e, e < 2u));
}

fn load_f32(r: u32, u: u32, o: ptr<function, array<f32, UNIT_SIZE>>) {
    (*o)[0] = bitcast<f32>(w[r * p.a.w + u]);
}

fn load_f16(r: u32, u: u32, o: ptr<function, array<f32, UNIT_SIZE>>) {
    (*o)[0] = half_to_f32(w_half(r * p.a.w + u));
}

fn load_bf16(r: u32, u: u32, o: ptr<function, array<f32, UNIT_SIZE>>) {
    (*o)[0] = bitcast<f32>(w_half(r * p.a.w + u) << 16u);
}

// Q8_0 body: 32 signed bytes (8 words); y = q * d.
fn load_q8_0(r: u32, u: u32, o: ptr<function, array<f32, UNIT_SIZE>>) {
    let g = r * p.b.w + u;
    let d = moved_scale(g);
    let base = g * 8u;
    for (var i = 0u; i < 32u; i++) {
        let word = w[base + (i >> 2u)];
        let q = i32(word << (24u - (i & 3u) * 8u)) >> 24u;
        (*o)[i] = f32(q) * d;
    }
}

// The value of a 4-bit code: Q4_0's code - 8, or MXFP4's doubled E2M1 value.
fn w_code(c: u32, mxfp4: bool) -> f32 {
    if (mxfp4) {
        return w_mxfp4_value(c);
    }
    return f32(i32(c) - 8);
}

// A Q4_0 or MXFP4 body of 16 bytes at word base: element j < 16 the low nibble of byte j, j + 16
// its high nibble; y = value * d.
fn w_nibble_unit(base: u32, d: f32, mxfp4: bool, o: ptr<function, array<f32, UNIT_SIZE>>) {
    for (var j = 0u; j < 16u; j++) {
        let q = w_byte(base, j);
        (*o)[j] = w_code(q & 15u, mxfp4) * d;
        (*o)[j + 16u] = w_code(q >> 4u, mxfp4) * d;
    }
}

// Q4_0 body: 16 bytes, f16 scale moved.
fn load_q4_0(r: u32, u: u32, o: ptr<function, array<f32, UNIT_SIZE>>) {
    let g = r * p.b.w + u;
    w_nibble_unit(g * 4u, moved_scale(g), false, o);
}

// Q4_1: the whole 20-byte block (d, m, 16 bytes); y = nibble * d + m.
fn load_q4_1(r: u32, u: u32, o: ptr<function, array<f32, UNIT_SIZE>>) {
    let g = r * p.b.w + u;
    let base = g * 5u;
    let dm = w[base];
    let d = half_to_f32(dm & 0xffffu);
    let m = half_to_f32(dm >> 16u);
    for (var j = 0u; j < 16u; j++) {
        let q = w_byte(base + 1u, j);
        (*o)[j] = f32(q & 15u) * d + m;
        (*o)[j + 16u] = f32(q >> 4u) * d + m;
    }
}

// Q5_0 body: qh (one word) then 16 bytes; bit j of qh is the fifth bit of element j.
fn load_q5_0(r: u32, u: u32, o: ptr<function, array<f32, UNIT_SIZE>>) {
    let g = r * p.b.w + u;
    let d = moved_scale(g);
    let base = g * 5u;
    let qh = w[base];
    for (var j = 0u; j < 16u; j++) {
        let q = w_byte(base + 1u, j);
        let h0 = ((qh >> j) << 4u) & 0x10u;
        let h1 = (qh >> (j + 12u)) & 0x10u;
        (*o)[j] = f32(i32((q & 15u) | h0) - 16) * d;
        (*o)[j + 16u] = f32(i32((q >> 4u) | h1) - 16) * d;
    }
}

// Q5_1: the whole 24-byte block (d, m, qh, 16 bytes); Q5_0's bits without the offset;
// y = value * d + m.
fn load_q5_1(r: u32, u: u32, o: ptr<function, array<f32, UNIT_SIZE>>) {
    let g = r * p.b.w + u;
    let base = g * 6u;
    let dm = w[base];
    let d = half_to_f32(dm & 0xffffu);
    let m = half_to_f32(dm >> 16u);
    let qh = w[base + 1u];
    for (var j = 0u; j < 16u; j++) {
        let q = w_byte(base + 2u, j);
        let h0 = ((qh >> j) << 4u) & 0x10u;
        let h1 = (qh >> (j + 12u)) & 0x10u;
        (*o)[j] = f32((q & 15u) | h0) * d + m;
        (*o)[j + 16u] = f32((q >> 4u) | h1) * d + m;
    }
}

// Unit s's scale d * sc (x) and min dmin * m (y) of the Q4_K or Q5_K super-block at word base:
// d and dmin in its first word, then the 12 bytes of 6-bit scales and mins (ggml-quants.c
// get_scale_min_k4).
fn w_k4_scale_min(base: u32, s: u32) -> vec2<f32> {
    let dd = w[base];
    let sb = base + 1u;
    var sc: u32;
    var mn: u32;
    if (s < 4u) {
        sc = w_byte(sb, s) & 63u;
        mn = w_byte(sb, s + 4u) & 63u;
    } else {
        sc = (w_byte(sb, s + 4u) & 15u) | ((w_byte(sb, s - 4u) >> 6u) << 4u);
        mn = (w_byte(sb, s + 4u) >> 4u) | ((w_byte(sb, s) >> 6u) << 4u);
    }
    return vec2<f32>(half_to_f32(dd & 0xffffu) * f32(sc), half_to_f32(dd >> 16u) * f32(mn));
}

// Unit u of row r of a Q4_K or Q5_K matrix, `words` a super-block (36 or 44): Q4_K's d, dmin,
// 12 bytes of 6-bit scales and mins, then for Q5_K 32 bytes of fifth bits (bit s of byte l for
// element l of unit s), then 128 bytes of nibbles. Unit s: group s / 2, low (even s) or high
// nibbles; y = (d * sc) * value - (dmin * m).
fn w_k4_unit(r: u32, u: u32, words: u32, o: ptr<function, array<f32, UNIT_SIZE>>) {
    let g = r * (p.b.w / 8u) + u / 8u;
    let s = u % 8u;
    let base = g * words;
    let dm = w_k4_scale_min(base, s);
    let high = words == 44u;
    let qb = select(base + 4u, base + 12u, high);
    let shift = (s & 1u) * 4u;
    for (var l = 0u; l < 32u; l++) {
        var q = (w_byte(qb, (s / 2u) * 32u + l) >> shift) & 15u;
        if (high) {
            q = q | (((w_byte(base + 4u, l) >> s) & 1u) << 4u);
        }
        (*o)[l] = dm.x * f32(q) - dm.y;
    }
}

// Q4_K: the whole 144-byte super-block (36 words).
fn load_q4_k(r: u32, u: u32, o: ptr<function, array<f32, UNIT_SIZE>>) {
    w_k4_unit(r, u, 36u, o);
}

// Q5_K: the whole 176-byte super-block (44 words).
fn load_q5_k(r: u32, u: u32, o: ptr<function, array<f32, UNIT_SIZE>>) {
    w_k4_unit(r, u, 44u, o);
}

// Q6_K body: ql (128 bytes), qh (64), 16 signed scales (52 words); d moved. Unit s: half s / 4,
// k = s % 4; element l takes ql[half * 64 + l + 32 (k & 1)] (low nibble for k < 2, high
// otherwise) and bits 2k of qh[half * 32 + l]; y = (d * scale) * (q - 32).
fn load_q6_k(r: u32, u: u32, o: ptr<function, array<f32, UNIT_SIZE>>) {
    let g = r * (p.b.w / 8u) + u / 8u;
    let s = u % 8u;
    let d = moved_scale(g);
    let base = g * 52u;
    let hf = s / 4u;
    let k = s % 4u;
    let nib_shift = (k / 2u) * 4u;
    for (var l = 0u; l < 32u; l++) {
        let ql = (w_byte(base, hf * 64u + l + 32u * (k & 1u)) >> nib_shift) & 15u;
        let qh = (w_byte(base, 128u + hf * 32u + l) >> (2u * k)) & 3u;
        let q = i32(ql | (qh << 4u)) - 32;
        let scb = w_byte(base, 192u + hf * 8u + l / 16u + 2u * k);
        let sc = i32(scb << 24u) >> 24u;
        (*o)[l] = d * f32(sc) * f32(q);
    }
}

// A code's doubled E2M1 value (quant's MXFP4_VALUES): magnitude nibble c & 7 of 0xC8643210
// (0, 1, 2, 3, 4, 6, 8, 12), negated when bit 3 is set, as an integer (code 8 is +0 in ggml's
// table, not -0).
fn w_mxfp4_value(c: u32) -> f32 {
    let m = i32((0xC8643210u >> ((c & 7u) * 4u)) & 15u);
    return f32(select(m, -m, (c & 8u) != 0u));
}

// MXFP4 body: 16 bytes in Q4_0's nibble order, E8M0 scale moved.
fn load_mxfp4(r: u32, u: u32, o: ptr<function, array<f32, UNIT_SIZE>>) {
    let g = r * p.b.w + u;
    w_nibble_unit(g * 4u, moved_scale_e8m0_half(g), true, o);
}
