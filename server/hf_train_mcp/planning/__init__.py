"""Planning each kind of job: training, evaluation and export, run_script, estimates, budgets, cards."""
