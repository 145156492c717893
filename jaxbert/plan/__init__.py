"""Planning a train step for devices that need not be here: compile it ahead of time (compile_step), bound its
time from the compiled HLO (roofline; the HLO read by hlo_text, walked as it runs by hlo_module, each instruction's
FLOPs counted by instruction_cost), and search the largest per-device batch per remat policy (batch_search)."""
