//! The CPU feature queries of ggml-cpu.h (`ggml_cpu_has_*`): 1 when the running CPU has the
//! feature, else 0, read at run time (Rust's `is_x86_feature_detected!` and
//! `is_aarch64_feature_detected!`: the CPU's and the kernel's answer together). ggml's answers
//! are its build's compile-time targets; packlm picks its kernels at run time by this same
//! detection (AVX2, FMA, AVX-512, ...), so the running CPU's answer is the true one here. Features of another architecture
//! answer 0, as they do in ggml; so do RISC-V, POWER, s390x and WebAssembly's, for which
//! packlm has no kernels.

/// One `int ggml_cpu_has_<name>(void)` per row: (the C function, the feature on x86-64, the
/// feature on aarch64); `-` where the feature belongs to the other architecture.
macro_rules! cpu_has {
    ($($name:ident: $x86:tt, $arm:tt;)*) => {
        $(
            #[no_mangle]
            pub extern "C" fn $name() -> i32 {
                cpu_has!(@x86 $x86) | cpu_has!(@arm $arm)
            }
        )*
    };
    (@x86 -) => { 0 };
    (@x86 $f:tt) => {{
        #[cfg(target_arch = "x86_64")]
        let has = std::arch::is_x86_feature_detected!($f) as i32;
        #[cfg(not(target_arch = "x86_64"))]
        let has = 0;
        has
    }};
    (@arm -) => { 0 };
    (@arm $f:tt) => {{
        #[cfg(target_arch = "aarch64")]
        let has = std::arch::is_aarch64_feature_detected!($f) as i32;
        #[cfg(not(target_arch = "aarch64"))]
        let has = 0;
        has
    }};
}

// The x86 rows follow ggml-cpu.c's macros (__AVX512F__ for avx512, __AVXVNNI__ for avx_vnni,
// ...); the Arm ones: NEON includes FMA (arm_fma), FEAT_FP16 is fp16_va, FEAT_I8MM matmul_int8.
cpu_has! {
    ggml_cpu_has_sse3: "sse3", -;
    ggml_cpu_has_ssse3: "ssse3", -;
    ggml_cpu_has_avx: "avx", -;
    ggml_cpu_has_avx_vnni: "avxvnni", -;
    ggml_cpu_has_avx2: "avx2", -;
    ggml_cpu_has_bmi2: "bmi2", -;
    ggml_cpu_has_f16c: "f16c", -;
    ggml_cpu_has_fma: "fma", -;
    ggml_cpu_has_avx512: "avx512f", -;
    ggml_cpu_has_avx512_vbmi: "avx512vbmi", -;
    ggml_cpu_has_avx512_vnni: "avx512vnni", -;
    ggml_cpu_has_avx512_bf16: "avx512bf16", -;
    ggml_cpu_has_neon: -, "neon";
    ggml_cpu_has_arm_fma: -, "neon";
    ggml_cpu_has_fp16_va: -, "fp16";
    ggml_cpu_has_dotprod: -, "dotprod";
    ggml_cpu_has_matmul_int8: -, "i8mm";
    ggml_cpu_has_sve: -, "sve";
    ggml_cpu_has_riscv_v: -, -;
    ggml_cpu_has_vsx: -, -;
    ggml_cpu_has_vxe: -, -;
    ggml_cpu_has_wasm_simd: -, -;
}

/// AMX-INT8: the CPU's CPUID bit (leaf 7, EDX bit 25) and the kernel's saving of the tile state
/// (XCR0 bits 17 and 18). Written out since Rust's detection of AMX is not stable.
#[no_mangle]
pub extern "C" fn ggml_cpu_has_amx_int8() -> i32 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv};
        // SAFETY: CPUID exists on every x86-64 CPU; XGETBV is called only when CPUID says the
        // OS enabled it (OSXSAVE, leaf 1 ECX bit 27).
        let has = unsafe {
            __cpuid(0).eax >= 7
                && __cpuid_count(7, 0).edx & (1 << 25) != 0
                && __cpuid(1).ecx & (1 << 27) != 0
                && (_xgetbv(0) >> 17) & 3 == 3
        };
        return has as i32;
    }
    #[allow(unreachable_code)]
    0
}

/// 0: packlm has no llamafile (tinyBLAS) kernels.
#[no_mangle]
pub extern "C" fn ggml_cpu_has_llamafile() -> i32 {
    0
}

/// Whether Linux's AT_HWCAP2 word has `bit` (the kernel's list of the CPU's Arm features, which
/// /proc/cpuinfo's "Features" line prints). Rust's detection of SME is not stable.
#[cfg(all(target_arch = "aarch64", target_os = "linux"))]
fn hwcap2_has(bit: u32) -> i32 {
    (unsafe { libc::getauxval(libc::AT_HWCAP2) } >> bit & 1) as i32
}

/// SME: HWCAP2_SME, bit 23 (Linux's arch/arm64/include/uapi/asm/hwcap.h).
#[no_mangle]
pub extern "C" fn ggml_cpu_has_sme() -> i32 {
    #[cfg(all(target_arch = "aarch64", target_os = "linux"))]
    return hwcap2_has(23);
    #[allow(unreachable_code)]
    0
}

/// SME2: HWCAP2_SME2, bit 37.
#[no_mangle]
pub extern "C" fn ggml_cpu_has_sme2() -> i32 {
    #[cfg(all(target_arch = "aarch64", target_os = "linux"))]
    return hwcap2_has(37);
    #[allow(unreachable_code)]
    0
}

/// The SVE vector length in bytes; 0 without SVE (Linux's prctl PR_SVE_GET_VL, the length in
/// its low 16 bits, as ggml-cpu reads it).
#[no_mangle]
pub extern "C" fn ggml_cpu_get_sve_cnt() -> i32 {
    #[cfg(all(target_arch = "aarch64", target_os = "linux"))]
    if std::arch::is_aarch64_feature_detected!("sve") {
        // linux/prctl.h: PR_SVE_GET_VL 51, PR_SVE_VL_LEN_MASK 0xffff.
        let vl = unsafe { libc::prctl(51) };
        return if vl < 0 { 0 } else { vl & 0xffff };
    }
    0
}

/// The RISC-V vector length in bytes: 0, no RISC-V vector kernels here.
#[no_mangle]
pub extern "C" fn ggml_cpu_get_rvv_vlen() -> i32 {
    0
}
