"""Planning a train step for devices that need not be here: compile it ahead of time (compile_step), bound its
time from the compiled HLO (roofline), and search the largest per-device batch per remat policy (batch_search)."""
