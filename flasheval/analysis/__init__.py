"""Analysis of the method: leave-one-out backtests, simulations, interval coverage, DIoR and Fluid Benchmarking."""
