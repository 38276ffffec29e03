//! The backend registry (ggml-backend.h): one backend, "CPU", with one device, "CPU". Both are
//! static objects, so every handle this library gives stays valid for the life of the process;
//! a handle that is not one of them is refused (NULL, 0 or -1) where ggml would assert.

use std::ffi::{c_char, CStr, CString};
use std::ptr;
use std::sync::OnceLock;

/// `enum ggml_backend_dev_type`: GGML_BACKEND_DEVICE_TYPE_CPU.
pub const DEVICE_TYPE_CPU: i32 = 0;

/// `struct ggml_backend_reg` (opaque to C): a backend and its devices.
pub struct Reg {
    name: &'static CStr,
    devices: &'static [&'static Device],
}

/// `struct ggml_backend_device` (opaque to C).
pub struct Device {
    name: &'static CStr,
    kind: i32,
    reg: &'static Reg,
    /// Made on first use (`ggml_backend_dev_description`).
    description: OnceLock<CString>,
}

/// `struct ggml_backend_dev_caps`.
#[repr(C)]
pub struct DevCaps {
    pub async_: bool,
    pub host_buffer: bool,
    pub buffer_from_host_ptr: bool,
    pub events: bool,
    pub mmap_support: bool,
}

/// `struct ggml_backend_dev_props`.
#[repr(C)]
pub struct DevProps {
    pub name: *const c_char,
    pub description: *const c_char,
    pub memory_free: usize,
    pub memory_total: usize,
    pub kind: i32,
    pub device_id: *const c_char,
    pub caps: DevCaps,
}

static CPU_REG: Reg = Reg { name: c"CPU", devices: &[&CPU_DEVICE] };
static CPU_DEVICE: Device = Device { name: c"CPU", kind: DEVICE_TYPE_CPU, reg: &CPU_REG, description: OnceLock::new() };

/// Every backend, in registry order.
static REGS: [&Reg; 1] = [&CPU_REG];

fn all_devices() -> impl Iterator<Item = &'static Device> {
    REGS.iter().flat_map(|r| r.devices.iter().copied())
}

/// The backend behind a handle; None for NULL or a pointer that is not one of ours.
fn reg_ref(p: *const Reg) -> Option<&'static Reg> {
    REGS.iter().copied().find(|r| ptr::eq(*r, p))
}

/// The device behind a handle; None for NULL or a pointer that is not one of ours.
fn device_ref(p: *const Device) -> Option<&'static Device> {
    all_devices().find(|d| ptr::eq(*d, p))
}

/// ggml's name match: ASCII letters compared without case.
unsafe fn name_is(name: &CStr, asked: *const c_char) -> bool {
    !asked.is_null() && name.to_bytes().eq_ignore_ascii_case(CStr::from_ptr(asked).to_bytes())
}

fn ptr_or_null<T>(v: Option<&'static T>) -> *const T {
    v.map_or(ptr::null(), |v| v as *const T)
}

/// The CPU's model name from /proc/cpuinfo ("model name" of its first processor), else "CPU":
/// ggml-cpu's description of its device.
fn cpu_description() -> CString {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = text.lines().find_map(|l| l.strip_prefix("model name").and_then(|rest| rest.split_once(':')).map(|(_, v)| v.trim()));
    CString::new(model.filter(|m| !m.is_empty()).unwrap_or("CPU")).unwrap_or_else(|_| c"CPU".to_owned())
}

/// The machine's physical memory in bytes (pages x page size), as both free and total: ggml-cpu
/// counts all of it as free ("free system memory is ill-defined").
fn cpu_memory() -> (usize, usize) {
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGE_SIZE) };
    let total = if pages > 0 && page_size > 0 { (pages as usize).saturating_mul(page_size as usize) } else { 0 };
    (total, total)
}

impl Device {
    fn description(&self) -> &CStr {
        self.description.get_or_init(cpu_description)
    }
}

/// Loads nothing: the CPU backend is built in, and there is no other backend library to find
/// (as ggml's own function in a build whose backends are all built in and none lies beside it).
#[no_mangle]
pub extern "C" fn ggml_backend_load_all() {}

/// As `ggml_backend_load_all`, whatever the folder.
#[no_mangle]
pub extern "C" fn ggml_backend_load_all_from_path(_dir_path: *const c_char) {}

#[no_mangle]
pub extern "C" fn ggml_backend_reg_count() -> usize {
    REGS.len()
}

/// The backend at `index`; NULL past the last.
#[no_mangle]
pub extern "C" fn ggml_backend_reg_get(index: usize) -> *const Reg {
    ptr_or_null(REGS.get(index).copied())
}

/// The backend of that name, compared without case; NULL when there is none.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_reg_by_name(name: *const c_char) -> *const Reg {
    ptr_or_null(REGS.iter().copied().find(|r| name_is(r.name, name)))
}

/// The CPU backend (ggml-cpu.h).
#[no_mangle]
pub extern "C" fn ggml_backend_cpu_reg() -> *const Reg {
    &CPU_REG
}

#[no_mangle]
pub unsafe extern "C" fn ggml_backend_reg_name(reg: *const Reg) -> *const c_char {
    reg_ref(reg).map_or(ptr::null(), |r| r.name.as_ptr())
}

#[no_mangle]
pub unsafe extern "C" fn ggml_backend_reg_dev_count(reg: *const Reg) -> usize {
    reg_ref(reg).map_or(0, |r| r.devices.len())
}

/// The backend's device at `index`; NULL past the last.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_reg_dev_get(reg: *const Reg, index: usize) -> *const Device {
    ptr_or_null(reg_ref(reg).and_then(|r| r.devices.get(index).copied()))
}

/// Devices of every backend.
#[no_mangle]
pub extern "C" fn ggml_backend_dev_count() -> usize {
    all_devices().count()
}

/// The device at `index` over every backend; NULL past the last.
#[no_mangle]
pub extern "C" fn ggml_backend_dev_get(index: usize) -> *const Device {
    ptr_or_null(all_devices().nth(index))
}

/// The device of that name, compared without case; NULL when there is none.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_by_name(name: *const c_char) -> *const Device {
    ptr_or_null(all_devices().find(|d| name_is(d.name, name)))
}

/// The first device of that type; NULL when there is none (every type but CPU).
#[no_mangle]
pub extern "C" fn ggml_backend_dev_by_type(kind: i32) -> *const Device {
    ptr_or_null(all_devices().find(|d| d.kind == kind))
}

#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_name(device: *const Device) -> *const c_char {
    device_ref(device).map_or(ptr::null(), |d| d.name.as_ptr())
}

/// The CPU's model name (/proc/cpuinfo), else "CPU".
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_description(device: *const Device) -> *const c_char {
    device_ref(device).map_or(ptr::null(), |d| d.description().as_ptr())
}

/// The device's type; -1 (no type) for a handle that is not a device.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_type(device: *const Device) -> i32 {
    device_ref(device).map_or(-1, |d| d.kind)
}

/// Free and total memory in bytes (for the CPU: physical memory, all of it counted free);
/// nothing is written for a handle that is not a device.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_memory(device: *const Device, free: *mut usize, total: *mut usize) {
    if device_ref(device).is_some() {
        let (f, t) = cpu_memory();
        if let Some(free) = free.as_mut() {
            *free = f;
        }
        if let Some(total) = total.as_mut() {
            *total = t;
        }
    }
}

/// Every property at once. Capabilities: no asynchronous work, pinned buffers or events, and no
/// buffers from host pointers (this library has no buffer functions); model files are mmapped.
/// `device_id` is NULL (not a PCI device). Nothing is written for a handle that is not a device.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_get_props(device: *const Device, props: *mut DevProps) {
    let (Some(d), Some(props)) = (device_ref(device), props.as_mut()) else { return };
    let (memory_free, memory_total) = cpu_memory();
    *props = DevProps {
        name: d.name.as_ptr(),
        description: d.description().as_ptr(),
        memory_free,
        memory_total,
        kind: d.kind,
        device_id: ptr::null(),
        caps: DevCaps { async_: false, host_buffer: false, buffer_from_host_ptr: false, events: false, mmap_support: true },
    };
}

/// The backend the device belongs to.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_backend_reg(device: *const Device) -> *const Reg {
    device_ref(device).map_or(ptr::null(), |d| d.reg as *const Reg)
}
