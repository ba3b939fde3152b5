//! Room for an op's outputs before its kernel runs, on a device whose kernels allocate without
//! asking the manager: CUDA, where the caching allocator serves a kernel directly (and the
//! simulated device when a test makes it allocate so: `simulate_cuda_allocator`). The front
//! door learns the bytes of the outputs the kernel will make from the op's meta kernel
//! (`outputs.cpp` beside this: the `tensorref` device and the runner of the generated ops ask
//! it; the op table's own bodies run over meta copies of their inputs, src/ops/output_bytes.rs),
//! and `Ticket::reserve` makes room for them: evicting, and waiting for memory the device
//! still uses, as for a load. The room stays counted against the budget (`reserved`) until the
//! outputs take it as storages, so that at no moment are the storages, the copies being freed
//! and the outputs together over the budget.
//!
//! Outputs that come without room made for them (an op whose sizes depend on its data, or without
//! a meta kernel, or one that reserves nothing: `dropout`) are counted in
//! `output_bytes_unreserved`: by that many bytes the
//! device may have held more than the budget while they appeared. On the simulated device's own
//! allocator every allocation asks first, and nothing is reserved.

use crate::error::Result;
use crate::residency::core::manager::Manager;
use crate::residency::Device;

impl Manager {
    /// Whether ops reserve room for their outputs before their kernels run (see the module).
    pub(crate) fn reserves(&self) -> bool {
        let unasked = match self.cfg.device {
            Device::Cuda(_) => true,
            Device::Simulated => crate::residency::device::memory::cuda_allocator_simulated(),
            Device::Cpu => false,
        };
        unasked && self.policy.bounded()
    }

    /// Makes room for `bytes` of `op`'s outputs and counts them as reserved until the op places
    /// them (`place_reserved`) or ends without them (`cancel_reservation`).
    pub(crate) fn reserve(&mut self, bytes: u64, op: &'static str) -> Result<()> {
        self.make_room(bytes, op)?;
        self.kernel_allocates(bytes);
        self.reserved += bytes;
        Ok(())
    }

    /// Places the outputs of an op that reserved `bytes` (`place`): they take the room as
    /// storages (`add_produced` draws on the reservation, and counts what exceeds it).
    pub(crate) fn place_reserved<R>(&mut self, bytes: u64, place: impl FnOnce(&mut Manager) -> Result<R>) -> Result<R> {
        self.let_go_of_reserved(bytes);
        self.reservation = bytes;
        let placed = place(self);
        self.reservation = 0;
        placed
    }

    /// The op that reserved `bytes` ends without its outputs (it failed, or gave up its room).
    pub(crate) fn cancel_reservation(&mut self, bytes: u64) {
        self.let_go_of_reserved(bytes);
        if bytes > 0 {
            crate::residency::core::room::freed();
        }
    }

    /// Saturating: a reservation made under a manager since replaced (configured while the op
    /// ran, which `configure` asks programs not to do) must not wrap the new one's count.
    fn let_go_of_reserved(&mut self, bytes: u64) {
        self.reserved = self.reserved.saturating_sub(bytes);
    }

    /// A new storage of `bytes` made on a device that reserves: the part beyond the running op's
    /// reservation came without room made for it.
    pub(in crate::residency) fn draw_reservation(&mut self, bytes: u64) {
        if self.reserves() {
            let covered = bytes.min(self.reservation);
            self.reservation -= covered;
            self.stats.output_bytes_unreserved += bytes - covered;
        }
    }
}
