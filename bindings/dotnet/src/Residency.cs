// The residency manager from C#: ResidencyConfig (device, policy, budget...), ResidencyManager
// (Configure returns a ResidencySession whose Dispose restores what was configured before it;
// Disable, Stats, MarkIteration, the Events event, the timeline), the ResidencyStats and
// ResidencyEvent snapshots, and Tensor.PinResident / IsResident. The P/Invokes and native structs
// are in Native.cs, the device/policy/event enums in Abi.g.cs (generated from the header).
//
// There is one manager per process (all threads, all languages), so this class's state is
// process-wide too. Event handlers run on the thread whose op caused the event while the library
// holds the manager's lock: a handler must not call libtensorref. The residency calls below refuse
// from a handler (InvalidOperationException); any other library call from a handler deadlocks.
// Nothing unwinds into native code: a handler's exception is caught and kept for
// TakeEventHandlerException.
using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.IO;
using System.Runtime.InteropServices;
using System.Threading;

namespace TensorRef
{
    /// <summary>How the residency manager runs. A new config holds the library's defaults.</summary>
    public sealed class ResidencyConfig
    {
        int _prefetchDepth;

        /// <summary>
        /// The library's defaults (tr_residency_config_default): simulated device, Flow, no budget
        /// (set one), page-locked host memory, prefetch as far ahead as the budget allows (depth 256
        /// ops), unlimited simulated capacity.
        /// </summary>
        public ResidencyConfig()
        {
            NativeResidencyConfig n;
            Native.Check(Native.tr_residency_config_default(out n), "tr_residency_config_default");
            Device = n.Device;
            DeviceIndex = n.DeviceIndex;
            Policy = n.Policy;
            BudgetBytes = n.BudgetBytes;
            PinHostMemory = n.PinHostMemory;
            PrefetchDepth = (int)n.PrefetchDepth;
            SimulatedCapacity = n.SimulatedCapacity;
            Recompute = n.Recompute;
        }

        /// <summary>The defaults with this policy and device budget.</summary>
        public ResidencyConfig(Policy policy, ulong budgetBytes) : this()
        {
            Policy = policy;
            BudgetBytes = budgetBytes;
        }

        /// <summary>The compute device: the simulated accelerator, CUDA, or the CPU (nothing moves).</summary>
        public Device Device { get; set; }

        /// <summary>The CUDA device number (Cuda only).</summary>
        public int DeviceIndex { get; set; }

        public Policy Policy { get; set; }

        /// <summary>Hard limit on the bytes the manager holds on the device (Resident ignores it).</summary>
        public ulong BudgetBytes { get; set; }

        /// <summary>Page-locked host copies (asynchronous CUDA copies).</summary>
        public bool PinHostMemory { get; set; }

        /// <summary>How many recorded ops ahead Flow looks for loads to start while the budget has room,
        /// once it follows a recorded trace (0: no prefetch).</summary>
        public int PrefetchDepth
        {
            get { return _prefetchDepth; }
            set
            {
                if (value < 0) throw new ArgumentOutOfRangeException("value", value, "PrefetchDepth cannot be negative");
                _prefetchDepth = value;
            }
        }

        /// <summary>The simulated device's physical memory; 0 for unlimited.</summary>
        public ulong SimulatedCapacity { get; set; }

        /// <summary>Whether evicted results that can be made again from their inputs are dropped rather
        /// than written back: never (the default), when that is estimated cheaper, or always.</summary>
        public Recompute Recompute { get; set; }

        public ResidencyConfig Clone() => (ResidencyConfig)MemberwiseClone();

        internal NativeResidencyConfig ToNative()
        {
            return new NativeResidencyConfig
            {
                Device = Device,
                DeviceIndex = DeviceIndex,
                Policy = Policy,
                BudgetBytes = BudgetBytes,
                PinHostMemory = PinHostMemory,
                PrefetchDepth = (uint)PrefetchDepth,
                SimulatedCapacity = SimulatedCapacity,
                Recompute = Recompute,
            };
        }

        public override string ToString() =>
            string.Format("{0} on {1}{2}, budget {3} bytes, prefetch depth {4}{5}{6}{7}", Policy, Device,
                          Device == Device.Cuda ? ":" + DeviceIndex : "", BudgetBytes, PrefetchDepth,
                          PinHostMemory ? ", pinned host memory" : "",
                          SimulatedCapacity > 0 ? ", simulated capacity " + SimulatedCapacity + " bytes" : "",
                          Recompute != Recompute.Off ? ", recomputation " + Recompute : "");
    }

    /// <summary>
    /// A configuration applied by ResidencyManager.Configure. Dispose restores what was configured
    /// before it (a fresh manager with that configuration, or none), also disposing any session
    /// opened after it that is still open. A second Dispose does nothing; an undisposed session
    /// simply leaves its configuration in place (the finalizer never reconfigures).
    /// </summary>
    public sealed class ResidencySession : IDisposable
    {
        internal readonly ResidencyConfig Previous;
        readonly ResidencyConfig _config;

        internal ResidencySession(ResidencyConfig config, ResidencyConfig previous)
        {
            _config = config;
            Previous = previous;
        }

        /// <summary>The configuration this session applied (a copy).</summary>
        public ResidencyConfig Config => _config.Clone();

        /// <summary>Whether Dispose ran (on this session or on one opened before it).</summary>
        public bool IsDisposed { get; internal set; }

        public void Dispose() => ResidencyManager.End(this);
    }

    /// <summary>The process's residency manager (one for all threads).</summary>
    public static class ResidencyManager
    {
        static readonly object Sync = new object();
        static readonly List<ResidencySession> Sessions = new List<ResidencySession>();
        static ResidencyConfig _current;

        // The handlers, as an array replaced (never changed) on subscribe and unsubscribe, so the
        // trampoline reads it without a lock. The trampoline itself is the only delegate the
        // library ever holds; a static field keeps it reachable for the life of the process.
        static Action<ResidencyEvent>[] _handlers = new Action<ResidencyEvent>[0];
        static readonly NativeEventFn Trampoline = OnNativeEvent;
        static readonly ConcurrentDictionary<IntPtr, string> OpNames = new ConcurrentDictionary<IntPtr, string>();
        static readonly Func<IntPtr, string> ReadOpName = p => Marshal.PtrToStringAnsi(p);

        [ThreadStatic] static int _inHandler;
        static Exception _handlerException;
        static long _handlerExceptions;

        /// <summary>
        /// Starts (or replaces) the manager with `config` (copied): from now on ops bring their
        /// inputs to the compute device and the policy places their results. Use the session in a
        /// `using` block to restore the previous configuration afterwards. Statistics start from
        /// zero; Events handlers stay subscribed. Throws TensorRefException (InvalidArg for an
        /// unknown device or policy or a zero budget under Genoa or Flow, Device for a missing
        /// CUDA device).
        /// </summary>
        public static ResidencySession Configure(ResidencyConfig config)
        {
            NotInHandler("ResidencyManager.Configure");
            if (config == null) throw new ArgumentNullException("config");
            var applied = config.Clone();
            lock (Sync)
            {
                var session = new ResidencySession(applied, _current);
                Apply(applied);
                Sessions.Add(session);
                return session;
            }
        }

        /// <summary>
        /// Stops the manager: newer device copies are written back and every device copy is freed.
        /// Without a manager this does nothing. An open session's Dispose still restores what was
        /// configured before it.
        /// </summary>
        public static void Disable()
        {
            NotInHandler("ResidencyManager.Disable");
            lock (Sync) Apply(null);
        }

        internal static void End(ResidencySession session)
        {
            NotInHandler("ResidencySession.Dispose");
            lock (Sync)
            {
                int i = Sessions.IndexOf(session);
                if (i < 0) return;
                for (int j = i; j < Sessions.Count; j++) Sessions[j].IsDisposed = true;
                Sessions.RemoveRange(i, Sessions.Count - i);
                Apply(session.Previous);
            }
        }

        static void Apply(ResidencyConfig config)
        {
            if (config == null)
            {
                Native.Check(Native.tr_residency_disable(), "tr_residency_disable");
                Volatile.Write(ref _current, null);
                return;
            }
            var n = config.ToNative();
            Native.Check(Native.tr_residency_configure(ref n), "tr_residency_configure");
            Volatile.Write(ref _current, config);
            // The callback belongs to the manager the library just replaced: register it again.
            if (_handlers.Length > 0)
                Native.Check(Native.tr_residency_set_callback(Trampoline, IntPtr.Zero), "tr_residency_set_callback");
        }

        /// <summary>
        /// Whether a manager is running (configured from here or from any other language):
        /// tr_residency_enabled, which never fails and leaves the thread's last error alone.
        /// </summary>
        public static bool Enabled
        {
            get
            {
                NotInHandler("ResidencyManager.Enabled");
                return Native.tr_residency_enabled();
            }
        }

        /// <summary>
        /// Whether the tensors autograd saves for backward go through the manager (a manager that
        /// moves data is running, and backward runs on libtorch's engine):
        /// tr_residency_saved_tensors_managed, which never fails.
        /// </summary>
        public static bool SavedTensorsManaged
        {
            get
            {
                NotInHandler("ResidencyManager.SavedTensorsManaged");
                return Native.tr_residency_saved_tensors_managed();
            }
        }

        /// <summary>The configuration last applied through this class (a copy), or null when disabled.</summary>
        public static ResidencyConfig Current => Volatile.Read(ref _current)?.Clone();

        /// <summary>The manager's counters now (tr_residency_stats_get). Throws TensorRefException (InvalidArg) without a manager.</summary>
        public static ResidencyStats Stats
        {
            get
            {
                NotInHandler("ResidencyManager.Stats");
                NativeResidencyStats s;
                Native.Check(Native.tr_residency_stats_get(out s), "tr_residency_stats_get");
                return new ResidencyStats(s);
            }
        }

        /// <summary>
        /// The simulated device's memory as its allocator counts it (tr_residency_device_memory):
        /// the budget holds of its peak. With <paramref name="resetPeak"/>, the peak starts again
        /// from what is alive now. All zero before a manager on the simulated device was configured.
        /// </summary>
        public static DeviceMemory DeviceMemory(bool resetPeak = false)
        {
            NotInHandler("ResidencyManager.DeviceMemory");
            NativeDeviceMemory m;
            Native.Check(Native.tr_residency_device_memory(resetPeak, out m), "tr_residency_device_memory");
            return new DeviceMemory(m);
        }

        /// <summary>
        /// Starts logging each iteration for the schedule model (tr_residency_schedule_log_start);
        /// under recompute "cheaper" the manager logs from the start.
        /// </summary>
        public static void ScheduleLogStart()
        {
            NotInHandler("ResidencyManager.ScheduleLogStart");
            Native.Check(Native.tr_residency_schedule_log_start(), "tr_residency_schedule_log_start");
        }

        /// <summary>
        /// The schedule model of the last complete iteration logged since <see cref="ScheduleLogStart"/>
        /// (tr_residency_schedule_model): the manager's copies and ops on a GPU with a copy engine each
        /// way, at the rates the manager prices with (an H100's on the simulated device), its matrix
        /// products counting elements of <paramref name="elementBytes"/> bytes. Throws
        /// TensorRefException (InvalidArg) without a manager or before an iteration was logged.
        /// </summary>
        public static ScheduleModel ScheduleModel(int elementBytes = 4)
        {
            NotInHandler("ResidencyManager.ScheduleModel");
            if (elementBytes <= 0)
                throw new ArgumentOutOfRangeException(nameof(elementBytes), "elementBytes must be 1, 2, 4 or 8");
            NativeScheduleModel m;
            Native.Check(Native.tr_residency_schedule_model((UIntPtr)elementBytes, out m), "tr_residency_schedule_model");
            return new ScheduleModel(m);
        }

        /// <summary>
        /// Marks the end of an iteration (a step, a forward pass): Flow evicts and prefetches by the
        /// ops since the previous mark. Throws TensorRefException (InvalidArg) without a manager.
        /// </summary>
        public static void MarkIteration()
        {
            NotInHandler("ResidencyManager.MarkIteration");
            Native.Check(Native.tr_residency_mark_iteration(), "tr_residency_mark_iteration");
        }

        /// <summary>Starts recording the manager's events for TimelineWrite. Throws TensorRefException (InvalidArg) without a manager.</summary>
        public static void TimelineStart()
        {
            NotInHandler("ResidencyManager.TimelineStart");
            Native.Check(Native.tr_residency_timeline_start(), "tr_residency_timeline_start");
        }

        /// <summary>
        /// Writes the events recorded since TimelineStart to `path` as Chrome trace / Perfetto JSON
        /// (open it at ui.perfetto.dev). Throws TensorRefException: InvalidArg without a manager or
        /// without a timeline started, Io when the path cannot be written.
        /// </summary>
        public static void TimelineWrite(string path)
        {
            NotInHandler("ResidencyManager.TimelineWrite");
            if (path == null) throw new ArgumentNullException("path");
            Native.Check(Native.tr_residency_timeline_write(Native.Utf8Z(Path.GetFullPath(path))), "tr_residency_timeline_write");
        }

        /// <summary>
        /// Every manager event (load, evict, write-back, prefetch, op begin and end), delivered on
        /// the thread whose op caused it, while the library holds the manager's lock: a handler
        /// must be quick and must not call libtensorref (the residency calls throw
        /// InvalidOperationException there; any other call deadlocks). Handlers stay subscribed
        /// across Configure and Disable. An exception from a handler does not reach the op: it is
        /// kept for TakeEventHandlerException and the other handlers still run.
        /// </summary>
        public static event Action<ResidencyEvent> Events
        {
            add
            {
                NotInHandler("subscribing to ResidencyManager.Events");
                if (value == null) return;
                lock (Sync)
                {
                    var now = new Action<ResidencyEvent>[_handlers.Length + 1];
                    Array.Copy(_handlers, now, _handlers.Length);
                    now[_handlers.Length] = value;
                    Volatile.Write(ref _handlers, now);
                    if (now.Length == 1) SetCallback(Trampoline);
                }
            }
            remove
            {
                NotInHandler("unsubscribing from ResidencyManager.Events");
                if (value == null) return;
                lock (Sync)
                {
                    int i = Array.LastIndexOf(_handlers, value);
                    if (i < 0) return;
                    var now = new Action<ResidencyEvent>[_handlers.Length - 1];
                    Array.Copy(_handlers, 0, now, 0, i);
                    Array.Copy(_handlers, i + 1, now, i, now.Length - i);
                    Volatile.Write(ref _handlers, now);
                    if (now.Length == 0) SetCallback(null);
                }
            }
        }

        /// <summary>Registers (or removes) the trampoline on the running manager; without one, Configure does it.</summary>
        static void SetCallback(NativeEventFn fn)
        {
            var status = Native.tr_residency_set_callback(fn, IntPtr.Zero);
            if (status != Status.InvalidArg) Native.Check(status, "tr_residency_set_callback");
        }

        /// <summary>The first exception an Events handler threw since the last call (null if none); clears it.</summary>
        public static Exception TakeEventHandlerException() => Interlocked.Exchange(ref _handlerException, null);

        /// <summary>How many times an Events handler has thrown in this process.</summary>
        public static long EventHandlerExceptionCount => Interlocked.Read(ref _handlerExceptions);

        // Called by the library with the manager locked. Must not throw.
        static void OnNativeEvent(ref NativeEvent e, IntPtr user)
        {
            try
            {
                var handlers = Volatile.Read(ref _handlers);
                if (handlers.Length == 0) return;
                var ev = new ResidencyEvent(ref e, e.Op == IntPtr.Zero ? "" : OpNames.GetOrAdd(e.Op, ReadOpName));
                _inHandler++;
                try
                {
                    foreach (var h in handlers)
                    {
                        try { h(ev); }
                        catch (Exception x) { Record(x); }
                    }
                }
                finally
                {
                    _inHandler--;
                }
            }
            catch (Exception x)
            {
                Record(x);
            }
        }

        static void Record(Exception x)
        {
            Interlocked.Increment(ref _handlerExceptions);
            Interlocked.CompareExchange(ref _handlerException, x, null);
        }

        internal static void NotInHandler(string what)
        {
            if (_inHandler != 0)
                throw new InvalidOperationException(
                    what + " was called from a ResidencyManager.Events handler: handlers run while the library " +
                    "holds the manager's lock and must not call libtensorref");
        }
    }

    /// <summary>The schedule model of one logged iteration (tr_schedule_model).</summary>
    public readonly struct ScheduleModel
    {
        internal ScheduleModel(NativeScheduleModel m)
        {
            StepSeconds = m.StepS;
            UnmanagedSeconds = m.UnmanagedS;
            BoundSeconds = m.BoundS;
            LoadedBytes = m.LoadedBytes;
            WrittenBytes = m.WrittenBytes;
        }

        /// <summary>The iteration's time with its copies, waits and results made again: a lower bound on the GPU modelled.</summary>
        public double StepSeconds { get; }
        /// <summary>The same iteration with everything resident.</summary>
        public double UnmanagedSeconds { get; }
        /// <summary>What no schedule of its copies and ops beats.</summary>
        public double BoundSeconds { get; }
        /// <summary>Bytes loaded onto the device in the iteration.</summary>
        public ulong LoadedBytes { get; }
        /// <summary>Bytes written back to host memory in the iteration.</summary>
        public ulong WrittenBytes { get; }
        /// <summary>StepSeconds over UnmanagedSeconds: what the manager's copies cost on that GPU, at least.</summary>
        public double Slowdown => UnmanagedSeconds > 0 ? StepSeconds / UnmanagedSeconds : 1.0;
    }

    /// <summary>The simulated device's memory at one moment (tr_device_memory), in bytes.</summary>
    public readonly struct DeviceMemory
    {
        internal DeviceMemory(NativeDeviceMemory m)
        {
            Live = m.Live;
            Peak = m.Peak;
            InFlight = m.InFlight;
            InFlightHere = m.InFlightHere;
            ScratchPeak = m.ScratchPeak;
        }

        /// <summary>Alive now.</summary>
        public ulong Live { get; }
        /// <summary>The most alive at once since the manager was configured or the peak was reset.</summary>
        public ulong Peak { get; }
        /// <summary>Allocated by running ops, not yet the manager's storages.</summary>
        public ulong InFlight { get; }
        /// <summary>In flight on the calling thread.</summary>
        public ulong InFlightHere { get; }
        /// <summary>The most a kernel allocated beyond its outputs at once, where the simulated device
        /// allocates as CUDA's (tr_residency_simulate_cuda_allocator); 0 otherwise.</summary>
        public ulong ScratchPeak { get; }
    }

    // ResidencyStats: its fields are generated from the ABI manifest (ResidencyStats.g.cs); what
    // is computed from them is here.
    public partial struct ResidencyStats
    {
        /// <summary>Whether the policy keeps to a budget (false under Resident).</summary>
        public bool IsBounded => Budget != ulong.MaxValue;

        public TimeSpan TransferWait => TimeSpan.FromTicks((long)(TransferWaitNs / 100));
    }

    /// <summary>One manager event (tr_event), copied for the handler.</summary>
    public struct ResidencyEvent
    {
        internal ResidencyEvent(ref NativeEvent e, string op)
        {
            Kind = e.Kind;
            Entry = e.Entry;
            Bytes = e.Bytes;
            DeviceBytes = e.DeviceBytes;
            Op = op;
            TimeMicroseconds = e.TimeUs;
            DurationMicroseconds = e.DurationUs;
        }

        public EventKind Kind { get; }
        /// <summary>The storage concerned (shared by aliases; not a handle id), 0 for op events.</summary>
        public ulong Entry { get; }
        public ulong Bytes { get; }
        /// <summary>The manager's device bytes right after the event.</summary>
        public ulong DeviceBytes { get; }
        /// <summary>The op's name ("matmul"), or what moved the bytes ("prefetch", "drain", "after op").</summary>
        public string Op { get; }
        /// <summary>Microseconds since the manager was configured.</summary>
        public double TimeMicroseconds { get; }
        /// <summary>How long a transfer took, in microseconds (0 for op events).</summary>
        public double DurationMicroseconds { get; }

        public override string ToString() =>
            string.Format("{0,10:F1} us {1} {2} entry {3} {4} B, device {5} B", TimeMicroseconds, Kind, Op, Entry, Bytes, DeviceBytes);
    }

    public sealed partial class Tensor
    {
        /// <summary>
        /// Pins this tensor resident on the device (loaded now, never evicted, counted against the
        /// budget), or with `false` unpins it. Returns this. Throws TensorRefException:
        /// BudgetTooSmall when the pinned bytes would exceed the budget, InvalidArg without a manager.
        /// </summary>
        public Tensor PinResident(bool pinned = true)
        {
            ResidencyManager.NotInHandler("Tensor.PinResident");
            Native.Check(Native.tr_tensor_pin_resident(Handle, pinned), "tr_tensor_pin_resident");
            return this;
        }

        /// <summary>Whether this tensor has a copy on the compute device now. Throws TensorRefException (InvalidArg) without a manager.</summary>
        public bool IsResident
        {
            get
            {
                ResidencyManager.NotInHandler("Tensor.IsResident");
                bool resident;
                Native.Check(Native.tr_tensor_is_resident(Handle, out resident), "tr_tensor_is_resident");
                return resident;
            }
        }
    }
}
