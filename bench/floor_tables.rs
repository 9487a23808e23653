//! The tables and columns a default conversion reads (as `NSYS_PERFETTO_SQL=1 nsys-perfetto ...`
//! lists them), for the floors `bench/floor.rs` (SQLite) and `bench/floor_arrow.rs` (Arrow).

pub const DEFAULT: &[(&str, &str)] = &[
    ("StringIds", "id,value"),
    ("TARGET_INFO_GPU", "cuDevice,name"),
    ("ThreadNames", "globalTid,nameId"),
    ("PROCESSES", "globalPid,name"),
    ("EXPORT_META_DATA", "name,value"),
    (
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "start,end,deviceId,globalPid,streamId,contextId,correlationId,shortName,demangledName,\
         gridX,gridY,gridZ,blockX,blockY,blockZ,registersPerThread,staticSharedMemory,\
         dynamicSharedMemory,launchType,graphNodeId",
    ),
    (
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "start,end,deviceId,globalPid,streamId,contextId,correlationId,bytes,copyKind,srcKind,\
         dstKind,srcDeviceId,dstDeviceId",
    ),
    (
        "CUPTI_ACTIVITY_KIND_MEMSET",
        "start,end,deviceId,globalPid,streamId,contextId,correlationId,bytes,value,memKind",
    ),
    (
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "start,end,globalTid,correlationId,nameId,returnValue",
    ),
    (
        "CUPTI_ACTIVITY_KIND_DRIVER",
        "start,end,globalTid,correlationId,nameId,returnValue",
    ),
    (
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
        "start,end,deviceId,globalPid,streamId,contextId,correlationId,syncType,eventId",
    ),
    (
        "NVTX_EVENTS",
        "start,end,eventType,globalTid,endGlobalTid,domainId,category,color,text,textId,\
         uint64Value,int64Value,doubleValue,uint32Value,int32Value,floatValue,jsonTextId,jsonText",
    ),
    (
        "OSRT_API",
        "start,end,globalTid,nameId,returnValue,callchainId",
    ),
    ("OSRT_CALLCHAINS", "id,symbol,stackDepth"),
    ("SCHED_EVENTS", "start,cpu,isSchedIn,globalTid"),
    // CPU samples and their call stacks (read in call-stack order, as the converter does).
    ("COMPOSITE_EVENTS", "id,start,globalTid,cpu,threadState"),
    ("SAMPLING_CALLCHAINS", "id,symbol,module,stackDepth"),
    (
        "PROFILER_OVERHEAD",
        "start,end,globalTid,nameId,returnValue",
    ),
    ("GPU_METRICS", "timestamp,typeId,metricId,value"),
    (
        "CUDA_GPU_MEMORY_USAGE_EVENTS",
        "start,globalPid,deviceId,bytes,memKind,memoryOperationType",
    ),
    ("DIAGNOSTIC_EVENT", "timestamp,source,severity,text"),
];
