"""The split torch.compile makes of a DDP model: export_ddp_plan.py --compiled calls record() to
fill a plan file's "compiled" section (docs/plan_files.md, "Compiled DDP").

Under torch.compile(DistributedDataParallel(model)), Dynamo's DDPOptimizer cuts the forward FX
graph into subgraphs at bucket boundaries of its own choosing, and each subgraph's backward then
produces all its gradients at once. record() runs the model once so, and writes down:
  - the forward graph as DDPOptimizer walked it: per node, the parameters it takes (by DDP name)
    and which nodes use its output — what ddpkit needs to compute the split itself;
  - the split DDPOptimizer made, read from its own result (the buckets it keeps on itself after
    compile_fn), not recomputed here.
Nothing is decided here that ddpkit's rule decides: a parameter reaching a node otherwise than
as a direct positional input is listed apart (other_params), frozen ones are kept (the file's
requires_grad says which), repeats stay repeats.

Needs PyTorch 2.x (DDPOptimizer arrived with torch.compile); the build and the tests never run it.
"""
import torch
from torch import fx

# A parameter reaches a node as a lifted placeholder (Dynamo inlines nn.Modules since 2.5), as a
# get_attr, or through a whole submodule (call_module, in graphs that keep modules).
LEAF_OPS = ("placeholder", "output")


def _ddp_optimizer_class():
    from torch._dynamo.backends.distributed import DDPOptimizer
    return DDPOptimizer


def _target_text(node):
    target = node.target
    return target if isinstance(target, str) else getattr(target, "__name__", str(target))


class _GraphNames:
    """DDP names of what a forward graph's nodes refer to: parameters by the real tensor behind
    a placeholder (Dynamo's GraphArg keeps it) or get_attr, modules by their target."""

    def __init__(self, gm, names_by_id):
        self.gm = gm
        self.names_by_id = names_by_id
        self.by_target = {}  # placeholder or get_attr target -> DDP name (what DDPOptimizer logs)
        for node in gm.graph.nodes:
            name = self._direct_param(node)
            if name is not None:
                self.by_target[str(node.target)] = name

    def _direct_param(self, node):
        if node.op == "placeholder":
            grapharg = node.meta.get("grapharg")
            real = grapharg.example if grapharg is not None else None
            return self.names_by_id.get(id(real)) if isinstance(real, torch.Tensor) else None
        if node.op == "get_attr":
            value = getattr(self.gm, str(node.target), None)
            return self.names_by_id.get(id(value)) if isinstance(value, torch.Tensor) else None
        return None

    def param_of(self, arg):
        """The DDP name of the parameter `arg` is, when DDPOptimizer would count it as a direct
        input: a placeholder whose example value is an nn.Parameter."""
        if not isinstance(arg, fx.Node) or arg.op != "placeholder":
            return None
        name = self._direct_param(arg)
        value = arg.meta.get("example_value")
        return name if name is not None and isinstance(value, torch.nn.Parameter) else None

    def any_param(self, arg):
        return self._direct_param(arg) if isinstance(arg, fx.Node) else None

    def module_params(self, target):
        module = self.gm.get_submodule(target)
        out = []
        for local, p in module.named_parameters():
            name = self.names_by_id.get(id(p))
            if name is None:
                raise SystemExit(f"export_ddp_plan: submodule {target}'s parameter {local} is "
                                 "not one of the model's")
            out.append((local, name))
        return out


def _submodule_target(gm, node):
    """The submodule a node calls: call_module's target, or for call_method the module its
    receiver names (DDPOptimizer looks both up)."""
    if node.op == "call_module":
        return str(node.target)
    if node.op == "call_method" and node.args and isinstance(node.args[0], fx.Node):
        receiver = node.args[0].target
        if isinstance(receiver, str):
            try:
                gm.get_submodule(receiver)
                return receiver
            except AttributeError:
                return None
    return None


def describe_graph(gm, names_by_id):
    """The forward graph's nodes in order, placeholders and the output left out (DDPOptimizer
    skips them): per node its op, target, parameters and users. Returns (nodes, index by node,
    names)."""
    names = _GraphNames(gm, names_by_id)
    walked = [n for n in gm.graph.nodes if n.op not in LEAF_OPS]
    index = {node: i for i, node in enumerate(walked)}
    nodes = []
    for node in walked:
        entry = {"name": node.name, "op": node.op, "target": _target_text(node)}
        if node.op == "get_attr":
            param = names.any_param(node)
            entry["params"] = [param] if param is not None else []
        else:
            entry["params"] = [p for p in map(names.param_of, node.args) if p is not None]
        if node.op == "call_method" and node.args and isinstance(node.args[0], fx.Node):
            entry["receiver"] = node.args[0].op  # DDPOptimizer looks further only at some
        counted = list(entry["params"])
        module = _submodule_target(gm, node)
        if module is not None:
            entry["module"] = module
            entry["module_params"] = [name for _, name in names.module_params(module)]
            counted += entry["module_params"]
        # Parameters reaching the node any other way (by keyword, inside a list): DDPOptimizer
        # does not count them; listed so that ddpkit can say so.
        reached = []
        fx.node.map_arg((node.args, node.kwargs),
                        lambda a: reached.append(names.any_param(a)) or a)
        other = [p for p in reached if p is not None]
        for p in counted:
            if p in other:
                other.remove(p)
        if other:
            entry["other_params"] = other
        entry["users"] = sorted(index[u] for u in node.users if u in index)
        entry["output"] = any(u.op == "output" for u in node.users)
        nodes.append(entry)
    return nodes, index, names


def _split_of(optimizer, index, names, gm):
    """DDPOptimizer's buckets as it left them on itself, in graph order (split_module's
    submod_0 first): nodes by index, parameters by DDP name in the order it added them."""
    by_logged_name = dict(names.by_target)
    for node in gm.graph.nodes:
        module = _submodule_target(gm, node)
        if module is not None:
            # logged as f"{node.target}_{local name}": call_method's target is the method's name
            for local, ddp_name in names.module_params(module):
                by_logged_name[f"{node.target}_{local}"] = ddp_name
    split = []
    for bucket in optimizer.buckets:
        unknown = [p for p in bucket.params if p not in by_logged_name]
        if unknown:
            raise SystemExit(f"export_ddp_plan: DDPOptimizer counted {unknown[0]}, which names "
                             "no parameter of the model")
        split.append({"nodes": sorted(index[n] for n in bucket.nodes),
                      "params": [by_logged_name[p] for p in bucket.params],
                      "bytes": bucket.size,
                      "nodes_added_past_cap": bucket.opcount_increased_to_capture_external_output})
    return split


def _check_storage(model):
    """DDPOptimizer sizes a parameter by its storage; ddpkit by its shape and dtype. They agree
    unless a parameter is a view into a larger storage, which this exporter refuses."""
    for name, p in model.named_parameters():
        if p.untyped_storage().nbytes() != p.numel() * p.element_size():
            raise SystemExit(f"export_ddp_plan: parameter {name} is a view into a larger storage "
                             f"({p.untyped_storage().nbytes()} bytes); DDPOptimizer would count "
                             "the whole storage, which a plan file cannot say")


def record(model, make_input, loss_of, bucket_cap_mb, backend):
    """Runs one iteration of torch.compile(DDP(model), backend=backend) under the default
    optimize_ddp ("ddp_optimizer") on the current process group, and returns the plan file's
    "compiled" section. `make_input()` gives the input, `loss_of(out)` the loss."""
    from torch.nn.parallel import DistributedDataParallel
    _check_storage(model)
    names_by_id = {id(p): n for n, p in model.named_parameters()}
    optimizer_class = _ddp_optimizer_class()
    original = optimizer_class.compile_fn
    graphs = []

    def recording_compile_fn(self, gm, example_inputs, **kwargs):
        nodes, index, names = describe_graph(gm, names_by_id)
        compiled = original(self, gm, example_inputs, **kwargs)
        graphs.append({"first_bucket_bytes_cap": self.first_bucket_cap,
                       "bucket_bytes_cap": self.bucket_bytes_cap,
                       "nodes": nodes, "split": _split_of(self, index, names, gm)})
        return compiled

    torch._dynamo.reset()
    torch._dynamo.config.optimize_ddp = "ddp_optimizer"
    optimizer_class.compile_fn = recording_compile_fn
    try:
        ddp = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
        compiled_model = torch.compile(ddp, backend=backend)
        loss_of(compiled_model(make_input())).backward()
    finally:
        optimizer_class.compile_fn = original
    if len(graphs) != 1:
        raise SystemExit(f"export_ddp_plan: the forward compiled into {len(graphs)} graphs "
                         "(graph breaks, or none captured); a plan file records one")
    graph = graphs[0]
    return {"torch_version": torch.__version__, "optimize_ddp": "ddp_optimizer",
            "backend": backend, "bucket_cap_mb": bucket_cap_mb,
            "bucket_bytes_cap": graph["bucket_bytes_cap"],
            "first_bucket_bytes_cap": graph["first_bucket_bytes_cap"],
            "nodes": graph["nodes"], "split": graph["split"]}


def write_lines(section):
    """The section as JSON text lines, one node and one subgraph per line, so that two files
    diff line by line."""
    import json
    lines = []
    keys = list(section)
    for i, key in enumerate(keys):
        value, comma = section[key], "," if i + 1 < len(keys) else ""
        if key in ("nodes", "split") and value:
            rows = ",\n".join("   " + json.dumps(v) for v in value)
            lines.append(f"  {json.dumps(key)}: [\n{rows}\n  ]{comma}")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}{comma}")
    return lines
