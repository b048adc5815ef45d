"""One JVM, many real Spark applications, one after another: the side-by-side harness's driver.

Run as a script in its own process (``python session_driver.py --class-path JARS``); it reads one
JSON command per line on stdin and answers each with one JSON line on stdout, in order:

- ``{"op": "start", "conf": {...}}``: a new SparkContext with this configuration (``started``,
  with its application id);
- ``{"op": "total", "n": N}``: ``SparkContext.requestTotalExecutors`` (what dynamic allocation
  calls to scale);
- ``{"op": "kill", "ids": [...]}``: ``SparkContext.killExecutors``;
- ``{"op": "decommission", "ids": [...]}``: the backend's ``decommissionExecutors`` as dynamic
  allocation calls it when ``spark.decommission.enabled`` (the target already lowered);
- ``{"op": "register", ...}``: a simulated executor registers (``SimulatedExecutors``);
- ``{"op": "received"}``: what the driver sent the simulated executors since the last call;
- ``{"op": "executors"}``: the executors the driver has registered;
- ``{"op": "stop"}``: ``SparkContext.stop()`` (the JVM stays for the next ``start``).

End of input stops the context and exits. The JVM starts once, at the first ``start``, with the
class path given (the plugin's jar and the test kit's): a JVM start costs about ten seconds, a
new SparkContext in a running JVM about one.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from typing import Any


def _say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


class Driver:
    def __init__(self, class_path: str) -> None:
        self._class_path = class_path
        self._sc: Any = None
        self._gateway: Any = None

    @property
    def _jvm(self) -> Any:
        return self._sc._jvm

    def _backend(self) -> Any:
        return self._sc._jsc.sc().schedulerBackend()

    def start(self, conf: dict[str, str]) -> dict[str, Any]:
        from pyspark import SparkConf, SparkContext  # noqa: PLC0415 (the driver's process only)

        if self._gateway is None:
            from pyspark import java_gateway  # noqa: PLC0415

            launch: Any = java_gateway.launch_gateway  # untyped
            boot = SparkConf(loadDefaults=False)
            if self._class_path:
                boot.set("spark.driver.extraClassPath", self._class_path)
            self._gateway = launch(boot)
        spark_conf = SparkConf(loadDefaults=False).setAll(sorted(conf.items()))
        self._sc = SparkContext(conf=spark_conf, gateway=self._gateway)
        return {"appId": self._sc.applicationId}

    def total(self, n: int) -> dict[str, Any]:
        jvm = self._jvm
        no_hosts = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(jvm.java.util.HashMap())
        ok = self._sc._jsc.sc().requestTotalExecutors(n, 0, no_hosts)
        return {"accepted": bool(ok)}

    def _seq(self, ids: list[str]) -> Any:
        jvm = self._jvm
        java_list = jvm.java.util.ArrayList()
        for executor_id in ids:
            java_list.add(str(executor_id))
        return jvm.scala.jdk.javaapi.CollectionConverters.asScala(java_list).toSeq()

    def kill(self, ids: list[str]) -> dict[str, Any]:
        return {"accepted": bool(self._sc._jsc.sc().killExecutors(self._seq(ids)))}

    def decommission(self, ids: list[str]) -> dict[str, Any]:
        jvm = self._jvm
        gateway = self._sc._gateway
        pairs = gateway.new_array(jvm.scala.Tuple2, len(ids))
        info_class = jvm.org.apache.spark.scheduler.ExecutorDecommissionInfo
        none = jvm.scala.Option.empty()
        for i, executor_id in enumerate(ids):
            pairs[i] = jvm.scala.Tuple2(str(executor_id), info_class("spark scale down", none))
        # ExecutorAllocationManager.removeExecutors: the target was already set; not adjusted.
        done = self._backend().decommissionExecutors(pairs, False, False)
        return {
            "decommissioned": sorted(
                str(x) for x in jvm.scala.jdk.javaapi.CollectionConverters.asJava(done)
            )
        }

    def register(self, command: dict[str, Any]) -> dict[str, Any]:
        kit = self._jvm.io.execpods.spark.testkit.SimulatedExecutors
        accepted = kit.register(
            command["driverUrl"],
            str(command["id"]),
            command["host"],
            int(command["cores"]),
            int(command.get("profile", 0)),
        )
        return {"accepted": bool(accepted)}

    def received(self) -> dict[str, Any]:
        kit = self._jvm.io.execpods.spark.testkit.SimulatedExecutors
        return {"messages": [str(m) for m in kit.received()]}

    def executors(self) -> dict[str, Any]:
        jvm = self._jvm
        ids = jvm.scala.jdk.javaapi.CollectionConverters.asJava(self._backend().getExecutorIds())
        return {"ids": sorted(str(x) for x in ids)}

    def stop(self) -> dict[str, Any]:
        if self._sc is not None:
            kit = self._jvm.io.execpods.spark.testkit.SimulatedExecutors
            self._sc.stop()
            kit.reset()
            self._sc = None
        return {}

    def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command.get("op")
        if op == "start":
            return self.start(dict(command["conf"]))
        if op == "total":
            return self.total(int(command["n"]))
        if op == "kill":
            return self.kill(list(command["ids"]))
        if op == "decommission":
            return self.decommission(list(command["ids"]))
        if op == "register":
            return self.register(command)
        if op == "received":
            return self.received()
        if op == "executors":
            return self.executors()
        if op == "stop":
            return self.stop()
        raise ValueError(f"unknown command {op!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--class-path", default="", help="jars for the driver's class path")
    args = parser.parse_args(argv)
    driver = Driver(args.class_path)
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            command = json.loads(line)
            try:
                answer = driver.handle(command)
            except Exception as error:
                _say("error", op=command.get("op"), message=f"{error}",
                     trace=traceback.format_exc()[-4000:])  # fmt: skip
                continue
            _say(str(command["op"]), **answer)
    finally:
        driver.stop()
        _say("exited")
    return 0


if __name__ == "__main__":
    sys.exit(main())
