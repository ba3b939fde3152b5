//! What libtorch knows of the storage a tensor views, and the manager's ways to make tensors
//! over storages (torch_storage.cpp beside this file): its StorageImpl and memory, views of one
//! storage's bytes, homes without memory until a storage must leave the device, page-locked
//! memory, and how many handles share a tensor.

use crate::dtype::DType;
use crate::shim::{make, run, Result};
use std::ffi::{c_char, c_int, c_void};

/// What the residency manager knows of the storage a tensor views (see storage.cpp).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StorageInfo {
    /// The StorageImpl's address: stable while any tensor views the storage.
    pub(crate) id: usize,
    pub(crate) nbytes: u64,
    /// 0 for a home without memory yet.
    has_memory: i32,
    external: i32,
    page_locked: i32,
    /// References to the StorageImpl (each tensor viewing it holds one).
    pub(crate) holders: i32,
}

impl StorageInfo {
    /// Code outside the library can reach the memory (a DLPack import or export).
    pub(crate) fn external(&self) -> bool {
        self.external != 0
    }
    pub(crate) fn page_locked(&self) -> bool {
        self.page_locked != 0
    }
}

#[allow(unused_doc_comments)]
/// cbindgen:ignore
extern "C" {
    fn tr_native_storage(t: *const c_void, cuda: c_int, out: *mut StorageInfo, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_storage_ref(t: *const c_void, out: *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_storage_ref_drop(r: *mut c_void);
    fn tr_native_storage_ref_bytes(r: *const c_void, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_storage_ref_view(r: *const c_void, like: *const c_void, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_storage_ref_holders(r: *const c_void) -> i32;
    fn tr_native_storage_ref_version(r: *const c_void) -> u32;
    fn tr_native_storage_ref_data(r: *const c_void) -> usize;
    fn tr_native_view_on(holder: *const c_void, like: *const c_void, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_device_view(storage: usize, like: *const c_void, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_alias_bytes(holder: *const c_void, offset: u64, nbytes: u64, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_result_home(t: *const c_void, out_home: *mut *mut c_void, out_home_ref: *mut c_void, out_device_ref: *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_home_allocate(home: *const c_void, pinned: c_int, cuda: c_int, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_home_pin(home: *const c_void, cuda: c_int, copy: c_int, out_old: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_copy_quiet(dst: *const c_void, src: *const c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_mark_external(t: *const c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_page_locked_empty(sizes: *const i64, ndim: usize, dtype: c_int, cuda: c_int, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_page_locked_allocations(cuda: c_int) -> u64;
    fn tr_native_tensor_holders(t: *const c_void) -> i32;
    fn tr_native_tensor_impl(t: *const c_void) -> usize;
    fn tr_native_requires_grad(t: *const c_void) -> c_int;
    fn tr_native_is_contiguous(t: *const c_void) -> c_int;
    fn tr_native_on_private_use1(t: *const c_void) -> c_int;
}

/// The storage `t` views. `cuda`: CUDA's page-locked allocator is in use (only then can its
/// memory be recognised).
pub(crate) fn storage(t: &tch::Tensor, cuda: bool) -> Result<StorageInfo> {
    let mut info = StorageInfo::default();
    // SAFETY: `t` is live for the call; `info` is a valid out pointer.
    run("storage", |err, len| unsafe { tr_native_storage(t.as_ptr().cast(), cuda.into(), &mut info, err, len) })?;
    Ok(info)
}

/// How many handles (`tch::Tensor`s, libtorch's `at::Tensor`s) share `t`'s TensorImpl: two
/// registered tensors may be one (an op may return its input).
pub(crate) fn tensor_holders(t: &tch::Tensor) -> i32 {
    // SAFETY: `t` is live for the call; the shim reads a reference count.
    unsafe { tr_native_tensor_holders(t.as_ptr().cast()) }
}

/// The address of `t`'s TensorImpl: handles with the same one are one tensor (`is_same`) to
/// libtorch's overlap checks.
pub(crate) fn tensor_impl(t: &tch::Tensor) -> usize {
    // SAFETY: `t` is live for the call; the shim reads a pointer.
    unsafe { tr_native_tensor_impl(t.as_ptr().cast()) }
}

/// Whether `t` is a tensor of the `tensorref` device (libtorch's PrivateUse1, which src/torch_device
/// registers), whose storage is the manager's already; false for an undefined tensor.
pub(crate) fn on_tensorref_device(t: &tch::Tensor) -> bool {
    // SAFETY: `t` is live for the call; the shim only reads its device.
    unsafe { tr_native_on_private_use1(t.as_ptr().cast()) != 0 }
}

/// Whether `t` requires grad, asked of libtorch directly: tch's `requires_grad` also looks for
/// an error after a call that cannot fail, about half its cost on an op's path.
pub(crate) fn requires_grad(t: &tch::Tensor) -> bool {
    // SAFETY: `t` is live for the call; the shim reads it.
    unsafe { tr_native_requires_grad(t.as_ptr().cast()) != 0 }
}

/// Whether `t` is contiguous, asked of libtorch directly (a flag it keeps; tch's call would
/// panic where libtorch threw, which it does not for a live tensor).
pub(crate) fn is_contiguous(t: &tch::Tensor) -> bool {
    // SAFETY: `t` is live for the call; the shim reads it.
    unsafe { tr_native_is_contiguous(t.as_ptr().cast()) != 0 }
}

/// What the manager keeps of a storage, its home or its device copy: a counted reference to its
/// StorageImpl and the version counter every tensor over it counts with (see torch_storage.cpp).
/// It holds no tensor: a byte tensor over the storage is made when its memory moves (`bytes`).
///
/// The C++ `StorageRef` itself, two words (a `c10::Storage` and a `c10::VariableVersion`, each one
/// pointer), built in place here by the shim and destroyed by it: keeping one allocates nothing,
/// and the first word is the StorageImpl's address.
#[repr(C)]
pub(crate) struct StorageRef {
    words: [usize; 2],
}

// SAFETY: the StorageImpl and version counter are reference counted atomically, as a tch::Tensor's
// are, and nothing here mutates them but through libtorch's own thread-safe calls.
unsafe impl Send for StorageRef {}
unsafe impl Sync for StorageRef {}

impl StorageRef {
    /// The storage `t` views, counting versions with `t`.
    pub(crate) fn of(t: &tch::Tensor) -> Result<StorageRef> {
        let mut r = std::mem::MaybeUninit::<StorageRef>::uninit();
        // SAFETY: `t` is live for the call; `r` is room for a StorageRef.
        run("storage", |err, len| unsafe { tr_native_storage_ref(t.as_ptr().cast(), r.as_mut_ptr().cast(), err, len) })?;
        // SAFETY: on success the shim built a StorageRef in `r`.
        Ok(unsafe { r.assume_init() })
    }

    fn ptr(&self) -> *const c_void {
        (self as *const StorageRef).cast()
    }

    /// The StorageImpl's address: stable while any tensor views the storage.
    pub(crate) fn id(&self) -> usize {
        self.words[0]
    }

    /// A 1-D uint8 tensor over the whole storage, on its device.
    pub(crate) fn bytes(&self) -> Result<tch::Tensor> {
        // SAFETY: `self` is live for the call.
        make("storage bytes", |out, err, len| unsafe { tr_native_storage_ref_bytes(self.ptr(), out, err, len) })
    }

    /// `like`'s dtype and geometry over this storage (and on its device).
    pub(crate) fn view(&self, like: &tch::Tensor) -> Result<tch::Tensor> {
        // SAFETY: both are live for the call.
        make("view", |out, err, len| unsafe { tr_native_storage_ref_view(self.ptr(), like.as_ptr().cast(), out, err, len) })
    }

    /// References to the StorageImpl: this one, and one for each tensor over the storage.
    pub(crate) fn holders(&self) -> i32 {
        // SAFETY: `self` is live for the call; the shim reads a reference count.
        unsafe { tr_native_storage_ref_holders(self.ptr()) }
    }

    /// The address of the storage's memory (0 for a home without memory yet).
    pub(crate) fn data_ptr(&self) -> usize {
        // SAFETY: `self` is live for the call; the shim reads a pointer.
        unsafe { tr_native_storage_ref_data(self.ptr()) }
    }

    /// The version autograd's counter gives the tensors over the storage (0 where they count
    /// none).
    pub(crate) fn version(&self) -> u32 {
        // SAFETY: `self` is live for the call; the shim reads a counter.
        unsafe { tr_native_storage_ref_version(self.ptr()) }
    }
}

impl Drop for StorageRef {
    fn drop(&mut self) {
        // SAFETY: the shim built `self`, which is destroyed once, here.
        unsafe { tr_native_storage_ref_drop((self as *mut StorageRef).cast()) }
    }
}

/// `like`'s dtype and geometry over the storage (and on the device) of `holder`.
pub(crate) fn view_on(holder: &tch::Tensor, like: &tch::Tensor) -> Result<tch::Tensor> {
    // SAFETY: both are live for the call.
    make("view", |out, err, len| unsafe { tr_native_view_on(holder.as_ptr().cast(), like.as_ptr().cast(), out, err, len) })
}

/// `like`'s view of the device copy `device`, counting versions with `like` (see torch_storage.cpp):
/// an op's input, made without following `device` into libtorch's objects.
pub(crate) fn device_view(device: &StorageRef, like: &tch::Tensor) -> Result<tch::Tensor> {
    // SAFETY: `device` (alive for the call) holds the StorageImpl at its id; `like` is live.
    make("view", |out, err, len| unsafe { tr_native_device_view(device.id(), like.as_ptr().cast(), out, err, len) })
}

/// `nbytes` of `holder`'s storage from byte `offset` on, as a 1-D byte tensor over a storage of
/// its own that keeps `holder`'s alive (see storage.cpp).
pub(crate) fn alias_bytes(holder: &tch::Tensor, offset: usize, nbytes: u64) -> Result<tch::Tensor> {
    // SAFETY: `holder` is live for the call.
    make("alias", |out, err, len| unsafe { tr_native_alias_bytes(holder.as_ptr().cast(), offset as u64, nbytes, out, err, len) })
}

/// What the manager keeps of a result it registers (see `result_home`).
pub(crate) struct ResultHome {
    /// A host tensor shaped like the result over a new storage of the same size with no memory
    /// yet, sharing the result's version counter.
    pub(crate) home: tch::Tensor,
    /// That storage.
    pub(crate) home_ref: StorageRef,
    /// The result's storage.
    pub(crate) device_ref: StorageRef,
}

/// The home of a result `t` (a device tensor), with what the manager keeps of both storages, in
/// one call into libtorch.
pub(crate) fn result_home(t: &tch::Tensor) -> Result<ResultHome> {
    let mut home = std::ptr::null_mut();
    let (mut home_ref, mut device_ref) = (std::mem::MaybeUninit::<StorageRef>::uninit(), std::mem::MaybeUninit::<StorageRef>::uninit());
    // SAFETY: `t` is live for the call; the out pointers are valid, the two refs room for one each.
    run("result home", |err, len| unsafe {
        tr_native_result_home(t.as_ptr().cast(), &mut home, home_ref.as_mut_ptr().cast(), device_ref.as_mut_ptr().cast(), err, len)
    })?;
    // SAFETY: on success the shim wrote a new heap `at::Tensor*` (which tch's Tensor owns) and built
    // both StorageRefs.
    unsafe { Ok(ResultHome { home: tch::Tensor::from_ptr(home.cast()), home_ref: home_ref.assume_init(), device_ref: device_ref.assume_init() }) }
}

/// Gives the lazy storage of `home` memory: page-locked when `pinned` (CUDA's caching host
/// allocator, or the simulated device's), else libtorch's pageable memory.
pub(crate) fn home_allocate(home: &tch::Tensor, pinned: bool, cuda: bool) -> Result<()> {
    // SAFETY: `home` is live for the call.
    run("home", |err, len| unsafe { tr_native_home_allocate(home.as_ptr().cast(), pinned.into(), cuda.into(), err, len) })
}

/// Moves the storage of `home` into page-locked memory, its bytes copied unless `copy` is false
/// (memory never written); returns the old memory, to be freed when no reader can still be
/// using it.
pub(crate) fn home_pin(home: &tch::Tensor, cuda: bool, copy: bool) -> Result<tch::Tensor> {
    // SAFETY: `home` is live for the call.
    make("page-locked home", |out, err, len| unsafe { tr_native_home_pin(home.as_ptr().cast(), cuda.into(), copy.into(), out, err, len) })
}

/// Copies `src` into `dst` without bumping autograd's version counter (the manager's copies are
/// not writes by the program).
pub(crate) fn copy_quiet(dst: &tch::Tensor, src: &tch::Tensor) -> Result<()> {
    // SAFETY: both are live for the call.
    run("copy", |err, len| unsafe { tr_native_copy_quiet(dst.as_ptr().cast(), src.as_ptr().cast(), err, len) })
}

/// Marks the storage of `t` as reachable from outside the library (before an export).
pub(crate) fn mark_external(t: &tch::Tensor) -> Result<()> {
    // SAFETY: `t` is live for the call.
    run("mark external", |err, len| unsafe { tr_native_mark_external(t.as_ptr().cast(), err, len) })
}

/// An uninitialised contiguous host tensor in page-locked memory.
pub(crate) fn page_locked_empty(shape: &[i64], dtype: DType, cuda: bool) -> Result<tch::Tensor> {
    // SAFETY: `shape` is valid for its length during the call; DType codes are c10's.
    make("page-locked tensor", |out, err, len| unsafe { tr_native_page_locked_empty(shape.as_ptr(), shape.len(), dtype as c_int, cuda.into(), out, err, len) })
}

/// How many times page-locked memory has had to be allocated (not served from the allocator's
/// cache): CUDA's caching host allocator's count (process-wide), or the simulated cache's.
pub(crate) fn page_locked_allocations(cuda: bool) -> u64 {
    // SAFETY: a plain call; the shim catches everything.
    unsafe { tr_native_page_locked_allocations(cuda.into()) }
}
