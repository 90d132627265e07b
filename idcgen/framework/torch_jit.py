"""TorchScript files as idcgen reads them: the module path of each operation, recovered from the module
hierarchy a TorchScript file keeps (docs/design.md, "PyTorch").

torch's TorchScript-to-export converter inlines every submodule's ``forward`` and records no module stack, so
a converted program's layers would be named by operation (``relu_2``). The file still holds each module's own
graph, calling its submodules by name (``prim::CallMethod`` on ``prim::GetAttr[name="fc_relu"]``): walked in
the order inlining expands it, it gives the module path of every ATen operation, which is matched in order to
the converted program's operations and written as their ``nn_module_stack``, as ``torch.export`` writes it for
an ``nn.Module``. An operation it cannot match (one the converter split or added) keeps no path: it is named
by operation. A traced module's graphs hold ATen operations and submodule calls only; a scripted module's
also hold branches and calls of TorchScript functions (``F.relu``, ``F.batch_norm``): a call counts as the
operation it is named for, and every branch's operations are listed in order, the lookahead skipping those
of the branch the converter left out. Either way every operation reading a weight must land in the module
owning it, or the layers stay named by operation rather than possibly wrongly.
"""

from __future__ import annotations

import torch

#: how far ahead (in TorchScript operations) a converted operation is looked for: the converter drops
#: shape bookkeeping (aten::size, aten::Int) that has no counterpart
_LOOKAHEAD = 12


#: converted operations spelled otherwise in TorchScript
_ALIASES = {
    "native_batch_norm_legit_no_training": "batch_norm",
    "conv2d": "convolution",
    "conv1d": "convolution",
    "conv3d": "convolution",
}


def _kind(name: str) -> str:
    """ "convolution" for aten::_convolution, aten::conv2d and aten.convolution, "relu" for relu_: one
    spelling per operation on both sides."""
    name = name.split("::")[-1].strip("_")
    return _ALIASES.get(name, name)


def module_ops(script) -> list[tuple[tuple, str]]:
    """(the module call stack, as (path, call) pairs, outermost first; the ATen operation) for each ATen
    operation of TorchScript module ``script``, in the order its inlined graph runs them (each branch's in
    turn); a call of a TorchScript function as the operation it is named for, "*" for a call not known here."""
    found: list[tuple[tuple, str]] = []
    calls = [0]

    def walk(nodes, values, stack):
        for node in nodes:
            kind = node.kind()
            if kind == "prim::GetAttr":
                owner = values.get(node.inputsAt(0).debugName())
                if owner is not None:
                    sub = getattr(owner[0], node.s("name"), None)
                    if isinstance(sub, torch.jit.ScriptModule):
                        path = f"{owner[1]}.{node.s('name')}" if owner[1] else node.s("name")
                        values[node.output().debugName()] = (sub, path)
            elif kind == "prim::CallMethod":  # forward, or forward1 (a traced module called twice), or a helper
                target = values.get(node.inputsAt(0).debugName())
                method = None if target is None else getattr(target[0], node.s("name"), None)
                if method is not None and hasattr(method, "graph"):
                    calls[0] += 1
                    graph = method.graph
                    inner = {next(graph.inputs()).debugName(): target}
                    walk(graph.nodes(), inner, stack + ((target[1], f"{target[1]}@{calls[0]}"),))
                else:
                    found.append((stack, "*"))
            elif kind == "prim::CallFunction":  # F.relu, F.batch_norm in a scripted module: named by the function
                function = node.inputsAt(0).node()
                named = function.kind() == "prim::Constant" and function.hasAttribute("name")
                found.append((stack, _kind(function.s("name")) if named else "*"))
            elif kind.startswith("aten::"):
                found.append((stack, _kind(kind)))
            else:  # an if or a loop: every branch, in order; the converter keeps the one that runs, which the
                for block in node.blocks():  # lookahead skips to (weights read in their own module, checked)
                    walk(block.nodes(), values, stack)

    graph = script.forward.graph
    walk(graph.nodes(), {next(graph.inputs()).debugName(): (script, "")}, ())
    return found


def name_by_modules(program, ops) -> bool:
    """Write the module stacks ``ops`` (``module_ops`` of the TorchScript module ``program`` was converted
    from, taken before the conversion: the converter inlines the module's graphs in place) into ``program``'s
    operations, so that its layers are named by module path. Every operation reading a weight must land in
    the module owning it; where one does not (the two graphs did not line up) nothing is written and False
    is returned: names by operation rather than wrong ones."""
    if any(kind == "*" for _, kind in ops):  # a call whose operations are not known here
        return False
    owners = {**program.graph_signature.inputs_to_parameters, **program.graph_signature.inputs_to_buffers}
    at, stacks = 0, {}
    for node in program.graph_module.graph.nodes:
        if node.op != "call_function" or not hasattr(node.target, "_overloadpacket"):
            continue
        name = node.target._overloadpacket.__name__
        kind = _kind(name)
        match = next((j for j in range(at, min(at + _LOOKAHEAD, len(ops))) if ops[j][1] == kind), None)
        if match is not None:
            stacks[node], at = ops[match][0], match + 1
    for node, stack in stacks.items():
        for arg in node.all_input_nodes:
            owner = owners.get(arg.name, "").rpartition(".")[0]
            if arg.name in owners and (not stack or stack[-1][0] != owner):
                return False
    for node in program.graph_module.graph.nodes:  # a tuple's value (a batch norm's output) in its module
        if node.op == "call_function" and not hasattr(node.target, "_overloadpacket") and node.args:
            source = node.args[0]
            if isinstance(source, torch.fx.Node) and source in stacks:
                stacks[node] = stacks[source]
    for node, stack in stacks.items():
        node.meta["nn_module_stack"] = {key: (path, "") for path, key in stack}
    return True
