"""Layer 2: the strategies (retry state machine and drivers, budgets, deadlines, hedge,
breaker, pipeline). Imports only seawall._core."""
