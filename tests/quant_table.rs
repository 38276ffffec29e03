//! The weight types' table (src/quant/mod.rs, `FORMATS`: one row per type) and the dispatch
//! built from it.
//!
//! - The gaps: every cell where a type has no kernel of its own while another type of its layout
//!   has one, printed with the row's reason (`cargo test --test quant_table -- --nocapture`).
//!   Each must be one of the deliberate absences listed here: a new gap fails until it is filled
//!   or listed, and a listed one that is filled fails until it is taken off the list.
//! - No block format ever falls back to the f32 kernels at `fast`, on any instruction set; the
//!   float formats always do, as their rows say.
//! - The kernels a backend picks are those of the row: the VNNI column's own kernels are the
//!   ones that read the wide activation views; the group kernels take exactly the matrices of
//!   the rows with a `groups` kernel.
//! - The GPU's moved scale lies where ggml-common.h puts a block's scale (f16, or MXFP4's E8M0
//!   byte), for exactly the block formats whose blocks are not whole 4-byte words.

mod common;
use common::quant::tensor;
use common::Rng;

use packlm::backend::host::int8::{Int8Isa, Int8Kernel};
use packlm::backend::host::packed::{self, Packed, GROUP, GROUP_AVX2};
use packlm::backend::host::row_dot::{Isa, RowKernel};
use packlm::quant::{Kernel, Layout, MovedScale, WeightType, FORMATS};

/// The cells deliberately without a kernel of their own where another type of the same layout
/// has one; the reasons are in the rows.
const DELIBERATE: [(WeightType, &str); 10] = [
    // The 16-lane one-row form at `exact` is Q5_0's alone: measured slower for Q8_0, not measured
    // for Q4_0 and MXFP4, and written without a min chain (Q4_1, Q5_1).
    (WeightType::Q8_0, "exact AVX-512 one row"),
    (WeightType::Q4_0, "exact AVX-512 one row"),
    (WeightType::Q4_1, "exact AVX-512 one row"),
    (WeightType::Q5_1, "exact AVX-512 one row"),
    (WeightType::MXFP4, "exact AVX-512 one row"),
    // MXFP4 has no NEON or group kernels so far.
    (WeightType::MXFP4, "fast NEON"),
    (WeightType::MXFP4, "fast groups (packed/)"),
    // Q4_K and Q5_K take block sums, and on VNNI the group kernels; Q6_K keeps lane sums (its
    // halves have scales of their own), which one weight row per lane cannot hold.
    (WeightType::Q4_K, "fast AVX-512 VNNI"),
    (WeightType::Q5_K, "fast AVX-512 VNNI"),
    (WeightType::Q6_K, "fast groups (packed/)"),
];

/// (type, column, reason) where the type has no kernel of its own and another type of its
/// layout has one.
fn gaps() -> Vec<(WeightType, &'static str, &'static str)> {
    let mut out = Vec::new();
    for f in FORMATS.iter() {
        for (c, &(column, why)) in f.columns().iter().enumerate() {
            let Some(why) = why else { continue };
            if FORMATS.iter().any(|g| g.layout == f.layout && g.columns()[c].1.is_none()) {
                out.push((f.ty, column, why));
            }
        }
    }
    out
}

#[test]
fn every_gap_is_deliberate() {
    let gaps = gaps();
    println!("{} gaps (a type without a kernel of its own where another of its layout has one):", gaps.len());
    for (ty, column, why) in &gaps {
        println!("  {ty} / {column}: {why}");
    }
    let unlisted: Vec<_> = gaps.iter().filter(|(ty, c, _)| !DELIBERATE.contains(&(*ty, *c))).collect();
    assert!(unlisted.is_empty(), "gaps neither filled nor listed as deliberate: {unlisted:?}");
    let filled: Vec<_> = DELIBERATE.iter().filter(|(ty, c)| !gaps.iter().any(|g| (g.0, g.1) == (*ty, *c))).collect();
    assert!(filled.is_empty(), "listed as deliberate gaps but not gaps any more: {filled:?}");
}

#[test]
fn every_absent_cell_says_why() {
    for f in FORMATS.iter() {
        for (column, why) in f.columns() {
            if let Some(why) = why {
                assert!(why.split_whitespace().count() >= 5, "{} / {column}: the reason {why:?} says too little", f.ty);
            }
        }
    }
}

/// Every column the table has: a misspelt name in `DELIBERATE` would otherwise never match.
#[test]
fn deliberate_gaps_name_real_columns() {
    let names: Vec<&str> = FORMATS[0].columns().iter().map(|c| c.0).collect();
    for (ty, column) in DELIBERATE {
        assert!(names.contains(&column), "{ty}: no column {column:?} in {names:?}");
    }
}

/// The rows hold each type once, in the order of the enum, and `ALL` is that order.
#[test]
fn rows_follow_the_enum() {
    assert_eq!(FORMATS.len(), WeightType::ALL.len());
    for (i, (f, ty)) in FORMATS.iter().zip(WeightType::ALL).enumerate() {
        assert_eq!(f.ty, ty, "row {i}");
        assert!(std::ptr::eq(ty.format(), f), "{ty}: format() is not its row");
    }
    // The layouts, from ggml-common.h's block structs (literal, not from the rows).
    let layouts = [
        (WeightType::F32, Layout::Float),
        (WeightType::F16, Layout::Float),
        (WeightType::BF16, Layout::Float),
        (WeightType::Q8_0, Layout::Blocks32),
        (WeightType::Q4_0, Layout::Blocks32),
        (WeightType::Q4_1, Layout::Blocks32),
        (WeightType::Q5_0, Layout::Blocks32),
        (WeightType::Q5_1, Layout::Blocks32),
        (WeightType::Q4_K, Layout::SuperBlocks),
        (WeightType::Q5_K, Layout::SuperBlocks),
        (WeightType::Q6_K, Layout::SuperBlocks),
        (WeightType::MXFP4, Layout::Blocks32),
    ];
    assert_eq!(layouts.len(), FORMATS.len());
    for (ty, layout) in layouts {
        assert_eq!(ty.format().layout, layout, "{ty}");
    }
    // The formats whose elements carry a min (ggml-common.h: the structs with `m` or `dmin`).
    for ty in WeightType::ALL {
        let with_min = matches!(ty, WeightType::Q4_1 | WeightType::Q5_1 | WeightType::Q4_K | WeightType::Q5_K);
        assert_eq!(ty.format().has_min, with_min, "{ty}");
    }
}

/// At `fast`, a block format gets an integer kernel on every instruction set (its own, or the
/// stand-in its row names: never the f32 kernels); a float format gets none, as its row says.
#[test]
fn fast_never_falls_back_to_f32_for_a_block_format() {
    for ty in WeightType::ALL {
        let portable = ty.format().fast.portable;
        for isa in [Int8Isa::Portable, Int8Isa::Avx2, Int8Isa::Avx512Vnni, Int8Isa::Neon] {
            let kernel = Int8Kernel::new(ty, isa);
            if ty.is_quantized() {
                assert!(kernel.is_some(), "{ty} on {isa:?}: no integer kernel");
                assert!(portable.get().is_some(), "{ty}: no portable integer kernel");
            } else {
                assert!(kernel.is_none(), "{ty} on {isa:?}: an integer kernel for a float type");
                assert!(portable.absent().is_some(), "{ty}: the row does not say why it has no integer kernel");
            }
        }
    }
}

/// The VNNI kernels are the ones that read the activations' wide views (`d8`, `c`): exactly
/// the rows whose VNNI column has a kernel of its own, where this CPU runs VNNI.
#[test]
fn vnni_rows_read_the_wide_views() {
    for ty in WeightType::ALL.into_iter().filter(|t| t.is_quantized()) {
        for isa in [Int8Isa::Portable, Int8Isa::Avx2, Int8Isa::Avx512Vnni, Int8Isa::Neon] {
            let kernel = Int8Kernel::new(ty, isa).expect("a block format");
            let own = ty.format().fast.vnni.get().is_some();
            let want = own && isa == Int8Isa::Avx512Vnni && isa.available();
            assert_eq!(kernel.reads_wide_rows(), want, "{ty} on {isa:?}");
        }
    }
}

/// The group kernels take the matrices of exactly the rows with a `groups` kernel, in groups
/// of either size; the exact kernels exist for every type on every instruction set.
#[test]
fn group_kernels_take_the_rows_that_name_them() {
    let mut rng = Rng(0x51ab_1e00_d00d_f00d);
    for ty in WeightType::ALL {
        let own = matches!(ty.format().fast.groups, Kernel::Own(_));
        assert_eq!(packed::takes(ty), own, "{ty}");
        let w = tensor(ty, 2 * GROUP, 256, &mut rng);
        for lanes in [GROUP, GROUP_AVX2] {
            let p = Packed::new(&w, lanes);
            assert_eq!(p.is_some(), own, "{ty}, groups of {lanes}");
            if let (Some(p), Kernel::Own(format)) = (p, ty.format().fast.groups) {
                assert_eq!(p.format, format, "{ty}");
            }
        }
        for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512, Isa::Neon] {
            let _ = RowKernel::new(ty, isa);
        }
    }
}

/// Where the GPU moves a block's scale out of it (gpu/weights.rs): ggml-common.h's offset and
/// size of the scale in the blocks that are not a whole number of 4-byte words (block_q8_0,
/// block_q4_0, block_q5_0 start with their f16 `d`; block_q6_K ends with it, after 128 + 64 + 16
/// bytes; block_mxfp4 starts with its 1-byte `e`), and in no other block format.
#[test]
fn gpu_moves_the_scale_of_the_blocks_that_are_not_words() {
    let moved = [(WeightType::Q8_0, 0, 2), (WeightType::Q4_0, 0, 2), (WeightType::Q5_0, 0, 2), (WeightType::Q6_K, 208, 2), (WeightType::MXFP4, 0, 1)];
    for ty in WeightType::ALL {
        let Kernel::Own(gpu) = ty.format().gpu else { panic!("{ty}: no GPU loader") };
        let want = moved.iter().find(|m| m.0 == ty).map(|m| MovedScale { at: m.1, bytes: m.2 });
        assert_eq!(gpu.moved_scale, want, "{ty}");
        if let Some(m) = want {
            assert_eq!((ty.block_bytes() - m.bytes) % 4, 0, "{ty}: the block less its scale is not whole words");
        }
        if ty.is_quantized() {
            assert_eq!(want.is_some(), ty.block_bytes() % 4 != 0, "{ty}: {} bytes a block", ty.block_bytes());
        }
        assert!(gpu.loader.starts_with("load_"), "{ty}: loader {}", gpu.loader);
    }
}
