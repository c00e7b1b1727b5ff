#!/usr/bin/env python3
"""k8s_check.py: rendered manifests of deploy/helm/walrelay validated and checked offline.

  k8s_check.py --swagger SWAGGER.json --crds CRD_DIR --alerts docker/alerts.yml
               --cmake CMakeLists.txt --chart Chart.yaml --toml-out DIR NAME=RENDERED.yaml...

Schemas (scripts/helm-check.sh says where they come from): every document's kind is looked up
by its group, version and kind in the Kubernetes OpenAPI (swagger 2.0) definitions or in the
CRDs' openAPIV3Schema, and validated strictly: an object schema that lists its properties
admits no other (as kubeconform's strict mode and openapi2jsonschema --strict do), so a
misspelled field is an error, not ignored. Kubernetes' int-or-string and Quantity admit both
forms.

Then what a user of the chart relies on (see scripts/helm-check.sh, step 3). Each ConfigMap's
walrelay.toml is written to --toml-out as NAME-CONFIGMAP.walrelay.toml for walrelay to parse.
Exit 1 with every failure listed.
"""
import argparse
import copy
import glob
import json
import os
import re
import sys

import jsonschema
import yaml

FAILURES = []

# YAML 1.1's "value" tag: a bare "=" (an enum member of some CRDs) is the string "=".
yaml.SafeLoader.add_constructor("tag:yaml.org,2002:value", yaml.SafeLoader.construct_yaml_str)


def fail(msg):
    FAILURES.append(msg)


def strict(schema):
    """Objects that list their properties admit no others (recursively)."""
    if isinstance(schema, dict):
        if schema.get("format") == "int-or-string":
            return {"oneOf": [{"type": "string"}, {"type": "integer"}]}
        out = {k: strict(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def load_schemas(swagger_path, crd_dir):
    swagger = json.load(open(swagger_path))
    defs = strict(swagger["definitions"])
    defs["io.k8s.apimachinery.pkg.api.resource.Quantity"] = {
        "oneOf": [{"type": "string"}, {"type": "number"}]}
    defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = {
        "oneOf": [{"type": "string"}, {"type": "integer"}]}
    by_gvk = {}
    for name, d in swagger["definitions"].items():
        for gvk in d.get("x-kubernetes-group-version-kind", []):
            api = f'{gvk["group"]}/{gvk["version"]}' if gvk["group"] else gvk["version"]
            by_gvk[(api, gvk["kind"])] = {"$ref": f"#/definitions/{name}", "definitions": defs}
    for path in glob.glob(os.path.join(crd_dir, "*.yaml")):
        crd = yaml.safe_load(open(path))
        if not crd or crd.get("kind") != "CustomResourceDefinition":
            continue
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for v in crd["spec"]["versions"]:
            schema = strict(copy.deepcopy(v["schema"]["openAPIV3Schema"]))
            by_gvk[(f'{group}/{v["name"]}', kind)] = schema
    return by_gvk


def validate(name, docs, by_gvk):
    counts = {}
    for d in docs:
        key = (d.get("apiVersion"), d.get("kind"))
        schema = by_gvk.get(key)
        if schema is None:
            fail(f"{name}: no schema for {key[0]} {key[1]}")
            continue
        errors = sorted(jsonschema.Draft4Validator(schema).iter_errors(d), key=lambda e: list(e.path))
        for e in errors[:5]:
            where = "/".join(str(p) for p in e.path)
            fail(f"{name}: {d['kind']} {d['metadata']['name']}: {where}: {e.message[:300]}")
        counts[d["kind"]] = counts.get(d["kind"], 0) + 1
    return counts


def one(docs, kind, name):
    found = [d for d in docs if d["kind"] == kind]
    if len(found) != 1:
        fail(f"{name}: {len(found)} {kind} documents, expected 1")
        return None
    return found[0]


def subset(small, big):
    return all(big.get(k) == v for k, v in (small or {}).items())


def check(name, docs, args):
    dep = one(docs, "Deployment", name)
    if dep is None:
        return
    spec = dep["spec"]
    pod_labels = spec["template"]["metadata"]["labels"]
    if spec.get("replicas") != 2:
        fail(f"{name}: Deployment replicas {spec.get('replicas')}, expected 2 (one streams, one stands by)")
    ru = spec.get("strategy", {}).get("rollingUpdate", {})
    if spec.get("strategy", {}).get("type") != "RollingUpdate" or ru.get("maxUnavailable") != 0:
        fail(f"{name}: the rolling update may drop below the replicas: {spec.get('strategy')}")
    pod = spec["template"]["spec"]
    psc = pod.get("securityContext", {})
    if psc.get("runAsNonRoot") is not True:
        fail(f"{name}: the pod may run as root (runAsNonRoot {psc.get('runAsNonRoot')})")
    (c,) = [c for c in pod["containers"] if c["name"] == "walrelay"] or [None]
    if c is None:
        fail(f"{name}: no container named walrelay")
        return
    if c.get("livenessProbe", {}).get("httpGet", {}).get("path") != "/healthz":
        fail(f"{name}: liveness probe is not GET /healthz: {c.get('livenessProbe')}")
    if c.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/readyz?standby=ready":
        fail(f"{name}: readiness probe is not GET /readyz?standby=ready (a standby must count "
             f"as available): {c.get('readinessProbe')}")
    sc = c.get("securityContext", {})
    if sc.get("readOnlyRootFilesystem") is not True or sc.get("allowPrivilegeEscalation") is not False:
        fail(f"{name}: the container's root is writable or it may escalate: {sc}")
    if c.get("args", [])[:1] != ["run"]:
        fail(f"{name}: the container does not run `walrelay run`: {c.get('args')}")
    for job in [d for d in docs if d["kind"] == "Job"]:
        for jc in job["spec"]["template"]["spec"]["containers"]:
            env_checks(name, f"Job {job['metadata']['name']}", jc)
    env_checks(name, "Deployment", c)

    pdb = one(docs, "PodDisruptionBudget", name)
    if pdb is not None:
        if pdb["spec"].get("minAvailable") != 1:
            fail(f"{name}: PodDisruptionBudget minAvailable {pdb['spec'].get('minAvailable')}, expected 1")
        if not pdb["spec"]["selector"].get("matchLabels") or not subset(pdb["spec"]["selector"]["matchLabels"], pod_labels):
            fail(f"{name}: the PodDisruptionBudget does not select the relays' pods")
    svc = one(docs, "Service", name)
    if svc is not None:
        if not subset(svc["spec"]["selector"], pod_labels):
            fail(f"{name}: the Service does not select the relays' pods")
        if [p["name"] for p in svc["spec"]["ports"]] != ["metrics"]:
            fail(f"{name}: the Service's ports are not [metrics]")
        if svc["spec"].get("publishNotReadyAddresses") is not True:
            fail(f"{name}: a relay that is not ready would not be scraped")

    for cm in [d for d in docs if d["kind"] == "ConfigMap"]:
        toml = cm.get("data", {}).get("walrelay.toml")
        if toml is None:
            fail(f"{name}: ConfigMap {cm['metadata']['name']} has no walrelay.toml")
            continue
        for k, v in cm.get("data", {}).items():
            if re.search(r"(?mi)^\s*password\s*=|password\s*=\s*[^\s\"]", v):
                fail(f"{name}: ConfigMap {cm['metadata']['name']} key {k} holds a password")
        with open(os.path.join(args.toml_out, f"{name}-{cm['metadata']['name']}.walrelay.toml"), "w") as f:
            f.write(toml)

    for sm in [d for d in docs if d["kind"] == "ServiceMonitor"]:
        if svc is not None and not subset(sm["spec"]["selector"].get("matchLabels"), svc["metadata"]["labels"]):
            fail(f"{name}: the ServiceMonitor does not select the Service")
        if [e.get("port") for e in sm["spec"]["endpoints"]] != ["metrics"]:
            fail(f"{name}: the ServiceMonitor does not scrape the metrics port")
    for pr in [d for d in docs if d["kind"] == "PrometheusRule"]:
        if pr["spec"] != yaml.safe_load(open(args.alerts)):
            fail(f"{name}: the PrometheusRule's rules differ from {args.alerts}")


def env_checks(name, where, container):
    for e in container.get("env", []):
        if "PASSWORD" in e["name"].upper() and "value" in e:
            fail(f"{name}: {where}: {e['name']} has a literal value: passwords come from a Secret")
        if e["name"] == "PGPASSWORD" and "secretKeyRef" not in e.get("valueFrom", {}):
            fail(f"{name}: {where}: PGPASSWORD not from a Secret")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--swagger", required=True)
    ap.add_argument("--crds", required=True)
    ap.add_argument("--alerts", required=True)
    ap.add_argument("--cmake", required=True)
    ap.add_argument("--chart", required=True)
    ap.add_argument("--toml-out", required=True)
    ap.add_argument("rendered", nargs="+")
    args = ap.parse_args()
    by_gvk = load_schemas(args.swagger, args.crds)

    chart = yaml.safe_load(open(args.chart))
    m = re.search(r"project\(walrelay VERSION ([0-9.]+)", open(args.cmake).read())
    if not m or chart.get("appVersion") != m.group(1):
        fail(f"Chart.yaml appVersion {chart.get('appVersion')} is not the project's version "
             f"{m.group(1) if m else '?'} (CMakeLists.txt)")
    chart_alerts = os.path.join(os.path.dirname(args.chart), "files", "alerts.yml")
    if open(chart_alerts, "rb").read() != open(args.alerts, "rb").read():
        fail(f"{chart_alerts} differs from {args.alerts}: copy it again (cp {args.alerts} {chart_alerts})")

    for item in args.rendered:
        name, path = item.split("=", 1)
        docs = [d for d in yaml.safe_load_all(open(path)) if d]
        before = len(FAILURES)
        counts = validate(name, docs, by_gvk)
        check(name, docs, args)
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
        status = "all valid, every check passed" if len(FAILURES) == before else f"{len(FAILURES) - before} failures"
        print(f"{name}: {len(docs)} documents ({kinds}) against their schemas and the checks: {status}")
    if FAILURES:
        print("\n".join(f"FAIL: {f}" for f in FAILURES), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
