"""Requests, workloads and instances: records, trace readers, transformations, SLO schemes, files.

Typical use::

    from slolab.instances import read_trace, trace_path, window, scale_rate, assign_slos

    workload = read_trace(trace_path("azure_conv_2023"))
    workload = scale_rate(window(workload, 600.0, 660.0), rate=4.0)
    workload = assign_slos(workload, "polyserve", seed=0, timing=timing)
"""

from slolab.instances.io import (
    InstanceFileError,
    add_shipped,
    instance_from_dict,
    instance_to_dict,
    load_instance,
    load_manifest,
    load_shipped,
    save_instance,
)
from slolab.instances.readers import (
    FORMATS,
    TRACES,
    TraceError,
    detect_format,
    read_azure,
    read_burstgpt,
    read_generic,
    read_lengths,
    read_mooncake,
    read_trace,
    read_vidur,
    resolve_trace,
    trace_path,
)
from slolab.instances.records import (
    MAX_REQUEST_TOKENS,
    POOL_ROLES,
    REQUIRED_COLUMNS,
    STANDARD_COLUMNS,
    Cluster,
    Instance,
    Pool,
    Request,
    Workload,
)
from slolab.instances.slos import (
    SCHEMES,
    assign_slos,
    idle_decode_s,
    register_scheme,
    scheme_names,
    scheme_params,
    tdg_token_weights,
    zero_load_prefill_s,
)
from slolab.instances.stream import parse_columns, read_workload
from slolab.instances.transform import (
    ARRIVAL_PROCESSES,
    draw_arrivals,
    first_n,
    mean_rate,
    retime,
    retime_poisson,
    sample,
    scale_rate,
    uniform_lengths,
    window,
)

__all__ = [
    "ARRIVAL_PROCESSES",
    "FORMATS",
    "MAX_REQUEST_TOKENS",
    "POOL_ROLES",
    "REQUIRED_COLUMNS",
    "SCHEMES",
    "STANDARD_COLUMNS",
    "TRACES",
    "Cluster",
    "Instance",
    "InstanceFileError",
    "Pool",
    "Request",
    "TraceError",
    "Workload",
    "add_shipped",
    "assign_slos",
    "detect_format",
    "draw_arrivals",
    "first_n",
    "idle_decode_s",
    "instance_from_dict",
    "instance_to_dict",
    "load_instance",
    "load_manifest",
    "load_shipped",
    "mean_rate",
    "parse_columns",
    "read_azure",
    "read_burstgpt",
    "read_generic",
    "read_lengths",
    "read_mooncake",
    "read_trace",
    "read_vidur",
    "read_workload",
    "register_scheme",
    "resolve_trace",
    "retime",
    "retime_poisson",
    "sample",
    "save_instance",
    "uniform_lengths",
    "scale_rate",
    "scheme_names",
    "scheme_params",
    "tdg_token_weights",
    "trace_path",
    "window",
    "zero_load_prefill_s",
]
