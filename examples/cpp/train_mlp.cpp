// Trains a small MLP through the C++ binding (include/tensorref.hpp) with one tr::Scope per step.
//
// The same scenario as examples/c/train_mlp.c and `make demo`: a 16-64-1 ReLU network learns
// y = tanh(2 x0 x1) from 256 random samples, MSE loss, plain SGD (tr::optim_sgd_step, lr 0.05), 300
// steps, seed 0; the same ops in the same order, so it reaches the same final loss. In C++ each
// temporary's tr::Tensor releases its handle at the end of the full expression, so a step holds
// few handles at once; the scope per step is still the guarantee: whatever the step created and
// did not move out dies with it, also when the step throws.
//
// Prints the loss every 50 steps, then the live handle count after every step (run-length
// encoded: "6 x 300" means 6 after each of the 300 steps) and the final loss. Exits 1 if a call
// throws, the live count ever moves, the loss does not fall, or a handle is left at the end.
//
//   make test-examples-native      (builds and runs it with the C version)
//   build/examples/train_mlp_cpp [steps]
#include "tensorref.hpp"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

struct Mlp {
    tr::Tensor w1, b1, w2, b2;

    static Mlp init() {
        Mlp m;
        m.w1 = (tr::randn({64, 16}) * 0.25).requires_grad_(true);
        m.b1 = tr::zeros({64}).requires_grad_(true);
        m.w2 = (tr::randn({1, 64}) * 0.125).requires_grad_(true);
        m.b2 = tr::zeros({1}).requires_grad_(true);
        return m;
    }

    tr::Tensor forward(const tr::Tensor& x) const { return x.linear(w1, b1).relu().linear(w2, b2); }

    std::array<const tr::Tensor*, 4> params() const { return {&w1, &b1, &w2, &b2}; }
};

// One SGD step inside its own scope; returns the loss before the update.
double train_step(const Mlp& model, const tr::Tensor& x, const tr::Tensor& y, size_t& peak_live) {
    tr::Scope scope;
    tr::Tensor loss = model.forward(x).mse_loss(y);
    loss.backward();
    tr::optim_sgd_step({model.w1, model.b1, model.w2, model.b2}, 0.05);
    for (const tr::Tensor* p : model.params()) p->zero_grad();
    peak_live = tr::live_handles();
    return loss.item();
}  // the scope disposes whatever the step left (here: nothing, RAII already released it all)

int run(int steps) {
    size_t live_at_start = tr::live_handles();
    std::vector<size_t> live(static_cast<size_t>(steps));
    double first_loss = 0, loss = 0;
    bool ok = true;
    {
        // Data and parameters, owned by this function (no scope is open).
        tr::manual_seed(0);
        tr::Tensor x = tr::randn({256, 16});
        tr::Tensor y = (x.narrow(1, 0, 1) * x.narrow(1, 1, 1) * 2.0).tanh();
        Mlp model = Mlp::init();

        std::printf("C++: training a 16-64-1 MLP for %d steps, one dispose scope per step\n", steps);
        for (int step = 0; step < steps; step++) {
            size_t during = 0;
            loss = train_step(model, x, y, during);
            live[step] = tr::live_handles();
            if (step == 0) first_loss = loss;
            if (step == 0 || (step + 1) % 50 == 0 || step == steps - 1) {
                std::printf("step %4d  loss %.6f  live during the step %zu  live after %zu\n", step + 1,
                            loss, during, live[step]);
            }
        }
    }  // x, y and the parameters are released here

    std::printf("live handles after each step:");
    for (size_t step = 0; step < live.size();) {
        size_t run = 1;
        while (step + run < live.size() && live[step + run] == live[step]) run++;
        std::printf(" %zu x %zu", live[step], run);
        if (run != live.size()) ok = false;
        step += run;
    }
    std::printf(" (%s)\n", ok ? "flat" : "NOT flat");
    std::printf("final loss: %.6f (first %.6f)\n", loss, first_loss);

    if (tr::live_handles() != live_at_start) {
        std::fprintf(stderr, "leak: %zu live handles at the end, %zu at the start\n", tr::live_handles(),
                     live_at_start);
        ok = false;
    }
    if (!(loss < first_loss * 0.5)) {
        std::fprintf(stderr, "the loss did not fall by half: %.6f -> %.6f\n", first_loss, loss);
        ok = false;
    }
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    int steps = argc > 1 ? std::atoi(argv[1]) : 300;
    if (steps < 1) {
        std::fprintf(stderr, "usage: %s [steps >= 1]\n", argv[0]);
        return 2;
    }
    try {
        return run(steps);
    } catch (const tr::Error& e) {
        std::fprintf(stderr, "train_mlp: %s\n", e.what());
        return 1;
    }
}
