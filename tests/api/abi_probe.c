/* Prints the size of each public struct of graft.h and the offset of each field, in
 * declaration order: tests/py/test_package.py checks the Python package's ctypes mirrors
 * against it. A field added to graft.h must be added here and in python/graft/_capi.py. */
#include <stddef.h>
#include <stdio.h>
#include "graft.h"

int main(void) {
    printf("gr_value_info %zu\n", sizeof(gr_value_info));
    printf("gr_value_info.name %zu\n", offsetof(gr_value_info, name));
    printf("gr_value_info.dtype %zu\n", offsetof(gr_value_info, dtype));
    printf("gr_value_info.ndim %zu\n", offsetof(gr_value_info, ndim));
    printf("gr_value_info.dims %zu\n", offsetof(gr_value_info, dims));
    printf("gr_value_info.sym_names %zu\n", offsetof(gr_value_info, sym_names));
    printf("gr_dim_info %zu\n", sizeof(gr_dim_info));
    printf("gr_dim_info.name %zu\n", offsetof(gr_dim_info, name));
    printf("gr_dim_info.lo %zu\n", offsetof(gr_dim_info, lo));
    printf("gr_dim_info.hi %zu\n", offsetof(gr_dim_info, hi));
    printf("gr_dim_info.declared %zu\n", offsetof(gr_dim_info, declared));
    printf("gr_session_options %zu\n", sizeof(gr_session_options));
    printf("gr_session_options.device %zu\n", offsetof(gr_session_options, device));
    printf("gr_session_options.mode %zu\n", offsetof(gr_session_options, mode));
    printf("gr_session_options.verbose %zu\n", offsetof(gr_session_options, verbose));
    printf("gr_session_options.max_rerecords %zu\n", offsetof(gr_session_options, max_rerecords));
    printf("gr_session_options.cache_dir %zu\n", offsetof(gr_session_options, cache_dir));
    printf("gr_session_options.no_partition %zu\n", offsetof(gr_session_options, no_partition));
    printf("gr_session_options.arena_policy %zu\n", offsetof(gr_session_options, arena_policy));
    printf("gr_session_options.no_fuse_attention %zu\n", offsetof(gr_session_options, no_fuse_attention));
    printf("gr_session_options.fuse_attention_f32 %zu\n", offsetof(gr_session_options, fuse_attention_f32));
    printf("gr_session_options.precision %zu\n", offsetof(gr_session_options, precision));
    printf("gr_session_options.shape_policy %zu\n", offsetof(gr_session_options, shape_policy));
    printf("gr_session_options.graph_memory_mb %zu\n", offsetof(gr_session_options, graph_memory_mb));
    printf("gr_session_options.no_persist_decisions %zu\n", offsetof(gr_session_options, no_persist_decisions));
    printf("gr_session_options.tp %zu\n", offsetof(gr_session_options, tp));
    printf("gr_session_options.no_plan_templates %zu\n", offsetof(gr_session_options, no_plan_templates));
    printf("gr_output %zu\n", sizeof(gr_output));
    printf("gr_output.generation %zu\n", offsetof(gr_output, generation));
    printf("gr_output.index %zu\n", offsetof(gr_output, index));
    printf("gr_run_stats %zu\n", sizeof(gr_run_stats));
    printf("gr_run_stats.time_us %zu\n", offsetof(gr_run_stats, time_us));
    printf("gr_run_stats.gpu_time_us %zu\n", offsetof(gr_run_stats, gpu_time_us));
    printf("gr_run_stats.kernels %zu\n", offsetof(gr_run_stats, kernels));
    printf("gr_run_stats.kernels_in_graphs %zu\n", offsetof(gr_run_stats, kernels_in_graphs));
    printf("gr_run_stats.graph_launches %zu\n", offsetof(gr_run_stats, graph_launches));
    printf("gr_run_stats.copies %zu\n", offsetof(gr_run_stats, copies));
    printf("gr_run_stats.bytes_copied %zu\n", offsetof(gr_run_stats, bytes_copied));
    printf("gr_run_stats.arena_bytes %zu\n", offsetof(gr_run_stats, arena_bytes));
    printf("gr_run_stats.weight_bytes %zu\n", offsetof(gr_run_stats, weight_bytes));
    printf("gr_run_stats.segments %zu\n", offsetof(gr_run_stats, segments));
    printf("gr_run_stats.segments_in_graphs %zu\n", offsetof(gr_run_stats, segments_in_graphs));
    printf("gr_run_stats.captures %zu\n", offsetof(gr_run_stats, captures));
    printf("gr_run_stats.device_bytes %zu\n", offsetof(gr_run_stats, device_bytes));
    printf("gr_run_stats.compile_us %zu\n", offsetof(gr_run_stats, compile_us));
    printf("gr_run_stats.capture_us %zu\n", offsetof(gr_run_stats, capture_us));
    printf("gr_run_stats.nodes_updated %zu\n", offsetof(gr_run_stats, nodes_updated));
    printf("gr_run_stats.inputs_in_place %zu\n", offsetof(gr_run_stats, inputs_in_place));
    printf("gr_run_stats.graph_bytes %zu\n", offsetof(gr_run_stats, graph_bytes));
    printf("gr_run_stats.graph_bytes_peak %zu\n", offsetof(gr_run_stats, graph_bytes_peak));
    printf("gr_run_stats.graph_budget_bytes %zu\n", offsetof(gr_run_stats, graph_budget_bytes));
    printf("gr_run_stats.instantiations %zu\n", offsetof(gr_run_stats, instantiations));
    printf("gr_run_stats.evictions %zu\n", offsetof(gr_run_stats, evictions));
    printf("gr_run_stats.graphs_live %zu\n", offsetof(gr_run_stats, graphs_live));
    printf("gr_run_stats.over_budget %zu\n", offsetof(gr_run_stats, over_budget));
    printf("gr_run_stats.plans_evicted %zu\n", offsetof(gr_run_stats, plans_evicted));
    printf("gr_run_stats.timed_runs %zu\n", offsetof(gr_run_stats, timed_runs));
    printf("gr_run_stats.decisions_measured %zu\n", offsetof(gr_run_stats, decisions_measured));
    printf("gr_run_stats.decisions_loaded %zu\n", offsetof(gr_run_stats, decisions_loaded));
    printf("gr_run_stats.exec_updates %zu\n", offsetof(gr_run_stats, exec_updates));
    printf("gr_run_stats.exec_updates_refused %zu\n", offsetof(gr_run_stats, exec_updates_refused));
    printf("gr_run_stats.padded_runs %zu\n", offsetof(gr_run_stats, padded_runs));
    printf("gr_run_stats.generic_runs %zu\n", offsetof(gr_run_stats, generic_runs));
    printf("gr_run_stats.generic_replays %zu\n", offsetof(gr_run_stats, generic_replays));
    printf("gr_run_stats.table_refreshes %zu\n", offsetof(gr_run_stats, table_refreshes));
    printf("gr_run_stats.table_bytes %zu\n", offsetof(gr_run_stats, table_bytes));
    printf("gr_run_stats.plans_compiled %zu\n", offsetof(gr_run_stats, plans_compiled));
    printf("gr_run_stats.plans_instantiated %zu\n", offsetof(gr_run_stats, plans_instantiated));
    printf("gr_run_stats.waits_on_host %zu\n", offsetof(gr_run_stats, waits_on_host));
    printf("gr_kernel_stats %zu\n", sizeof(gr_kernel_stats));
    printf("gr_kernel_stats.prepared %zu\n", offsetof(gr_kernel_stats, prepared));
    printf("gr_kernel_stats.compiled %zu\n", offsetof(gr_kernel_stats, compiled));
    printf("gr_kernel_stats.disk_cache_hits %zu\n", offsetof(gr_kernel_stats, disk_cache_hits));
    printf("gr_kernel_stats.modules_loaded %zu\n", offsetof(gr_kernel_stats, modules_loaded));
    printf("gr_kernel_stats.generic_new %zu\n", offsetof(gr_kernel_stats, generic_new));
    printf("gr_kernel_stats.generic_reused %zu\n", offsetof(gr_kernel_stats, generic_reused));
    printf("gr_kernel_stats.generic_fallbacks %zu\n", offsetof(gr_kernel_stats, generic_fallbacks));
    printf("gr_capture_report %zu\n", sizeof(gr_capture_report));
    printf("gr_capture_report.bindings %zu\n", offsetof(gr_capture_report, bindings));
    printf("gr_capture_report.total_ms %zu\n", offsetof(gr_capture_report, total_ms));
    printf("gr_capture_report.compile_ms %zu\n", offsetof(gr_capture_report, compile_ms));
    printf("gr_capture_report.capture_ms %zu\n", offsetof(gr_capture_report, capture_ms));
    printf("gr_capture_report.captures %zu\n", offsetof(gr_capture_report, captures));
    printf("gr_capture_report.instantiations %zu\n", offsetof(gr_capture_report, instantiations));
    printf("gr_capture_report.exec_updates %zu\n", offsetof(gr_capture_report, exec_updates));
    printf("gr_capture_report.instantiate_ms %zu\n", offsetof(gr_capture_report, instantiate_ms));
    return 0;
}
