//! Instructions per 4-element add (op + release), raw tch against TensorRef through Rust and
//! through the C ABI, and through the C ABI under a manager (`resident`, `genoa`, `flow`: the
//! simulated device, a budget of 1 GiB that nothing is evicted under): a figure that does not
//! depend on how busy the machine is. Run under callgrind twice with different counts; the
//! difference cancels libtorch's start-up:
//!
//!     cargo bench --bench instructions --no-run
//!     valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/deps/instructions-<hash> <raw|rust|c|resident|genoa|flow> 10000
//!     (and again with 30000; instructions per op = difference / 20000)
//!
//! For the C ABI's rows, counting only inside its two calls takes one run (per op = total / n):
//! add `--toggle-collect='tr_tensor_*'`.

use std::hint::black_box;
use tensorref::ffi::{tr_tensor_add, tr_tensor_copy_to, tr_tensor_release, TrTensor};
use tensorref::residency::{self, Config, Device, Policy};
use tensorref::{DType, Status, Tensor};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (mode, n): (&str, usize) = (args.get(1).map_or("raw", String::as_str), args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10_000));
    match mode {
        "raw" => {
            let (a, b) = (tch::Tensor::ones([4], tch::kind::FLOAT_CPU), tch::Tensor::ones([4], tch::kind::FLOAT_CPU));
            for _ in 0..n {
                drop(black_box(a.f_add(&b).unwrap()));
            }
        }
        "c" | "resident" | "genoa" | "flow" => {
            let policy = match mode {
                "resident" => Some(Policy::Resident),
                "genoa" => Some(Policy::Genoa),
                "flow" => Some(Policy::Flow),
                _ => None,
            };
            if let Some(policy) = policy {
                residency::configure(Config::new(Device::Simulated, policy, 1 << 30)).unwrap();
            }
            let (a, b) = (Tensor::ones(&[4], DType::F32).unwrap(), Tensor::ones(&[4], DType::F32).unwrap());
            let (ca, cb) = (TrTensor::from(a.id()), TrTensor::from(b.id()));
            for i in 0..n {
                let mut out = TrTensor { id: 0 };
                assert_eq!(tr_tensor_add(ca, cb, &mut out), Status::TR_OK);
                if i + 1 == n {
                    // The last result, read back whole: the counted ops computed what they should.
                    let mut bytes = [0u8; 16];
                    let mut written = 0;
                    assert_eq!(tr_tensor_copy_to(out, bytes.as_mut_ptr(), bytes.len(), &mut written), Status::TR_OK);
                    let values: Vec<f32> = bytes.chunks(4).map(|c| f32::from_ne_bytes(c.try_into().unwrap())).collect();
                    assert_eq!((written, values), (16, vec![2.0; 4]), "{mode}: 1 + 1");
                }
                tr_tensor_release(black_box(out));
            }
        }
        _ => {
            let (a, b) = (Tensor::ones(&[4], DType::F32).unwrap(), Tensor::ones(&[4], DType::F32).unwrap());
            for _ in 0..n {
                drop(black_box(a.add(&b).unwrap()));
            }
        }
    }
}
