"""The module graph of idcgen: no import cycle (nor anywhere in the repository: recipes, benchmarks, tests; and no
recipe script imports another), no back-edge into a higher layer, the framework behind one
boundary (only idcgen/framework's implementation modules import Keras or TensorFlow), and modules that need
only numpy import without TensorFlow (a notebook or a Ray worker that only reads campaigns should not pay for
it)."""

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "idcgen"

#: modules of the command-line layer: nothing below them may import them
TOP = {
    "idcgen.cli",
    "idcgen.campaigns",
    "idcgen.commandline",
    "idcgen.session",
    "idcgen.demo",
    "idcgen.export",
    "idcgen.report",
    "idcgen.hardening",
}

#: modules that need numpy (and the image libraries) but never TensorFlow
NUMPY_ONLY = [
    "idcgen.errors",
    "idcgen.files",
    "idcgen.imageio",
    "idcgen.annotate",
    "idcgen.quality",
    "idcgen.clusters",
    "idcgen.coverage",
    "idcgen.importance",
    "idcgen.data",
    "idcgen.data.dataset",
    "idcgen.data.readers",
    "idcgen.data.named",
    "idcgen.data.fitting",
    "idcgen.data.loading",
    "idcgen.data.labelfile",
    "idcgen.convention",
    "idcgen.fuzz.corpus",
    "idcgen.fuzz.oracle",
    "idcgen.fuzz.scheduler",
    "idcgen.fuzz.validity",
    "idcgen.fuzz.guidance",
    "idcgen.fuzz.statefile",
    "idcgen.fuzz.integrity",
    "idcgen.fuzz.store",
    "idcgen.fuzz.settings",
    "idcgen.fuzz.mutators",
    "idcgen.distributed",
    "idcgen.distributed.cluster",
    "idcgen.distributed.workers",
    "idcgen.distributed.parallel",
    "idcgen.distributed.shards",
    "idcgen.distributed.measures",
    "idcgen.distributed.actor",
    "idcgen.distributed.actor.inputs",
    "idcgen.distributed.actor.relevance",
    "idcgen.distributed.actor.coverage",
    "idcgen.distributed.actor.measures",
    "idcgen.deepinspect",
    "idcgen.deepinspect.statistics",
    "idcgen.deepinspect.driver",
    "idcgen.deepinspect.report",
    "idcgen.deepbase",
    "idcgen.deepbase.statistics",
    "idcgen.deepbase.units",
    "idcgen.deepbase.driver",
    "idcgen.deepbase.report",
    "idcgen.deepbase.hypotheses",
    "idcgen.markdown",
    "idcgen.framework",
    "idcgen.relevance",
    "idcgen.analysis",
    "idcgen.analysis.record",
    "idcgen.analysis.passes",
    "idcgen.analysis.search",
    "idcgen.fuzz.campaign",
    "idcgen.fuzz.fuzzer",
    "idcgen.report",
    "idcgen.export",
    "idcgen.criteria",
    "idcgen.hardening",
]

#: the deep-learning frameworks (and the attack libraries built on them) only the framework package imports
FRAMEWORKS = ("keras", "tensorflow", "tf_keras", "cleverhans", "art", "torch")
#: the framework boundary: the protocol and its dispatch (framework-neutral) and the implementation modules
FRAMEWORK = "idcgen.framework"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set) -> set:
    """idcgen modules imported anywhere in the file (module level and inside functions alike)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = ".".join(base[: len(base) - node.level + 1])
                stem = f"{base}.{node.module}" if node.module else base
            else:
                stem = node.module or ""
            targets = [stem] + [f"{stem}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # "idcgen.fuzz.mutators.Mutator" -> the module
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):  # a package's own __init__ is no edge
                found.add(target)
    return found


def graph() -> dict:
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in files}
    return {module_name(p): imports_of(p, modules) for p in files}


def cycles(edges: dict) -> list:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def run_fresh(code: str) -> None:
    """Run ``code`` in a new interpreter: what it imports is not already loaded by other tests."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    edges = graph()
    assert "idcgen.fuzz.mutators.base" in edges["idcgen.fuzz.mutators.attacks"]  # the parser sees relative imports
    assert cycles(edges) == []


#: the folders whose files import one another by top-level name (each is on sys.path when its files run)
SCRIPT_ROOTS = ("recipes", "benchmarks", "tests")


def repository_graph() -> dict:
    """The import graph of every Python file in the repository: idcgen's modules by their dotted names, and
    the files of each script folder (SCRIPT_ROOTS: ``recipes/rq1.py`` is ``recipes:rq1``, ``recipes/kit/data.py``
    ``recipes:kit.data``) by the names they import each other by; an import resolves within its own folder
    first, then in idcgen."""
    repo = PACKAGE.parent
    edges = {name: {t for t in targets} for name, targets in graph().items()}
    package_modules = set(edges)
    for root in SCRIPT_ROOTS:
        files = sorted(p for p in (repo / root).rglob("*.py") if "venv" not in p.parts)
        names = {p: ".".join(p.relative_to(repo / root).with_suffix("").parts).removesuffix(".__init__") for p in files}
        local = set(names.values())
        for path, name in names.items():
            found = set()
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    targets = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    stem = node.module or ""
                    if node.level:
                        base = package.split(".")[: len(package.split(".")) - node.level + 1] if package else []
                        stem = ".".join([*base, *([node.module] if node.module else [])])
                    targets = [stem] + [f"{stem}.{alias.name}" for alias in node.names]
                else:
                    continue
                for target in targets:
                    for known, prefix in ((local, f"{root}:"), (package_modules, "")):
                        t = target
                        while t and t not in known:
                            t = t.rpartition(".")[0]
                        if t:
                            if prefix + t != f"{root}:{name}" and not name.startswith(t + "."):
                                found.add(prefix + t)
                            break
            edges[f"{root}:{name}"] = found
    return edges


def test_no_import_cycle_anywhere_in_the_repository():
    edges = repository_graph()
    assert "recipes:kit.paths" in edges["recipes:kit.models"]  # relative imports inside the recipes' kit
    assert "recipes:kit" in edges["recipes:rq1_important_vs_random"] and "idcgen.data" in edges["recipes:kit.data"]
    assert "tests:test_recipes" in edges["tests:test_prioritization_recipes"]  # script folders see each other's files
    assert cycles(edges) == []


def test_no_recipe_script_imports_another():
    # a recipe is a script: what two recipes share lives in recipes/kit, which imports no script
    recipes = PACKAGE.parent / "recipes"
    scripts = {f"recipes:{p.stem}" for p in recipes.glob("*.py")}
    scripts |= {f"recipes:superseded.{p.stem}" for p in recipes.glob("superseded/*.py")}  # the earlier studies
    assert "recipes:rq1_important_vs_random" in scripts and "recipes:kit" not in scripts
    assert "recipes:superseded.guidance_v3" in scripts
    edges = repository_graph()
    found = {
        (source, target)
        for source, targets in edges.items()
        if source.startswith("recipes:")
        for target in targets
        if target in scripts
    }
    assert found == set()


def test_the_repository_graph_sees_an_import_between_scripts(tmp_path, monkeypatch):
    # the checks above are only as good as the graph: a script importing another, and a cycle, are found
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "idcgen")
    (tmp_path / "idcgen").mkdir()
    (tmp_path / "idcgen" / "__init__.py").write_text("")
    for root in SCRIPT_ROOTS:
        (tmp_path / root).mkdir()
    (tmp_path / "recipes" / "kit").mkdir()
    (tmp_path / "recipes" / "kit" / "__init__.py").write_text("from .data import load\n")
    (tmp_path / "recipes" / "kit" / "data.py").write_text("import idcgen\ndef load():\n    from rq1 import x\n")
    (tmp_path / "recipes" / "rq1.py").write_text("from kit import load\nx = 1\n")
    (tmp_path / "recipes" / "rq2.py").write_text("import rq1\n")
    edges = repository_graph()
    assert edges["recipes:rq2"] == {"recipes:rq1"} and edges["recipes:kit.data"] == {"idcgen", "recipes:rq1"}
    assert cycles(edges) == [["recipes:kit", "recipes:kit.data", "recipes:rq1"]]


def test_no_back_edge_into_the_command_layer():
    back = {
        (source, target)
        for source, targets in graph().items()
        for target in targets
        if target in TOP and source not in TOP
    }
    assert back == set()
    # and the fuzz package does not reach up into the command layer either
    assert not any(t in TOP for s, ts in graph().items() if s.startswith("idcgen.fuzz") for t in ts)


def test_numpy_only_modules_import_without_tensorflow():
    code = (
        "import sys, importlib\n"
        f"for name in {NUMPY_ONLY!r}:\n"
        "    importlib.import_module(name)\n"
        "    heavy = [m for m in ('tensorflow', 'keras') if m in sys.modules]\n"
        "    assert not heavy, f'{name} imports {heavy}'\n"
    )
    run_fresh(code)


def test_no_module_cites_a_document_outside_the_repository():
    root = PACKAGE.parent
    cited = [
        str(p.relative_to(root))
        for folder in ("idcgen", "tests", "recipes", "benchmarks")
        for p in (root / folder).rglob("*.py")
        if p.name != "test_imports.py" and ("DESIGN §" in p.read_text() or "shared/DESIGN" in p.read_text())
    ]
    assert cited == []


def test_ray_is_imported_lazily_and_only_by_the_distributed_package():
    # Ray is an optional extra: no module imports it at load time, and only idcgen.distributed uses it at all
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        top = set(map(id, tree.body))
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            if any(n == "ray" or n.startswith("ray.") for n in names):
                found.append((module_name(path), id(node) in top))
    assert found and all(name.startswith("idcgen.distributed") and not at_top for name, at_top in found), found
    code = (
        "import sys, importlib\n"
        "for name in ('idcgen.cli', 'idcgen.distributed', 'idcgen.distributed.workers',\n"
        "             'idcgen.distributed.parallel'):\n"
        "    importlib.import_module(name)\n"
        "assert 'ray' not in sys.modules, 'ray imported at load time'\n"
    )
    run_fresh(code)


def test_exported_names_stay_what_they_name_once_every_module_is_imported():
    # importing idcgen.X sets the package's attribute X to that module, hiding a lazily exported name X
    import idcgen

    submodules = {p.stem for p in PACKAGE.glob("*.py")} | {
        p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()
    }
    assert not set(idcgen._NAMES) & submodules
    code = (
        "import importlib, pkgutil, types, idcgen, idcgen.cli\n"
        "for info in pkgutil.walk_packages(idcgen.__path__, 'idcgen.'):\n"
        "    importlib.import_module(info.name)\n"
        "for name in ('inspect', 'affinity', 'harden'):\n"
        "    assert isinstance(getattr(idcgen, name), types.FunctionType), (name, getattr(idcgen, name))\n"
        "for name, module in idcgen._NAMES.items():\n"
        "    assert getattr(idcgen, name) is getattr(importlib.import_module('idcgen.' + module), name), name\n"
    )
    run_fresh(code)


def module_level_imports(tree: ast.Module) -> list:
    """Import statements run when the module is imported: at the top, inside module-level if/try/with/for
    blocks and class bodies; not inside functions (which run only when called)."""
    found, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo.extend(
                child
                for child in ast.iter_child_nodes(node)
                if isinstance(child, ast.stmt) or isinstance(child, (ast.excepthandler, ast.match_case))
            )
    return found


def imported_names(node, path: Path) -> list:
    """Absolute module names an import statement names (relative ones resolved against ``path``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not node.level:
        return [node.module or ""] + [f"{node.module}.{alias.name}" for alias in node.names]
    name = module_name(path)
    package = (name if path.name == "__init__.py" else name.rsplit(".", 1)[0]).split(".")
    base = ".".join(package[: len(package) - node.level + 1])
    stem = f"{base}.{node.module}" if node.module else base
    return [stem] + [f"{stem}.{alias.name}" for alias in node.names]


def is_framework(name: str) -> bool:
    return name.split(".")[0] in FRAMEWORKS


#: modules of the framework package that import no framework (scanned like any other module)
FRAMEWORK_FREE = (FRAMEWORK + ".common",)


def is_implementation(name: str) -> bool:
    """A module of the framework package that imports a framework: everything in it but its __init__ and its
    framework-free ``common`` (a name imported from the package itself, ``from idcgen.framework import
    Network``, is no module)."""
    return (
        name.startswith(FRAMEWORK + ".")
        and name not in FRAMEWORK_FREE
        and (PACKAGE.parent / (name.replace(".", "/") + ".py")).is_file()
    )


def test_the_module_level_finder_sees_imports_in_blocks_and_classes_but_not_functions():
    tree = ast.parse(
        "import a\nif x:\n    import b\ntry:\n    import c\nexcept ImportError:\n    import d\n"
        "class K:\n    import e\n    def f(self):\n        import g\ndef h():\n    import i\n"
    )
    assert sorted(n.names[0].name for n in module_level_imports(tree)) == ["a", "b", "c", "d", "e"]


def test_only_the_framework_package_imports_keras_or_tensorflow_at_module_level():
    # the boundary: importing any other module, directly or through an implementation module of
    # the framework package, never loads a framework
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        if is_implementation(name):
            continue
        for node in module_level_imports(ast.parse(path.read_text())):
            if any(is_framework(t) or is_implementation(t) for t in imported_names(node, path)):
                found.append((name, node.lineno))
    assert found == []


def test_no_module_outside_the_framework_package_imports_a_framework_at_all():
    # stronger than the boundary: functions outside idcgen/framework reach a framework only through a Network
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        if name == FRAMEWORK or is_implementation(name):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and any(map(is_framework, imported_names(node, path))):
                found.append((name, node.lineno))
    assert found == []


def test_every_module_outside_the_framework_imports_where_tensorflow_cannot():
    modules = sorted(m for m in graph() if not is_implementation(m))
    assert "idcgen.session" in modules and "idcgen.framework" in modules
    code = (
        "import sys, importlib\n"
        "for blocked in ('tensorflow', 'keras', 'tf_keras'):\n"
        "    sys.modules[blocked] = None   # import fails\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
    )
    run_fresh(code)
