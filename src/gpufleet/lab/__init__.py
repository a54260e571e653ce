"""The lab: a real local Kubernetes control plane for gpufleet's live tests and demos.

kube-apiserver, kube-controller-manager (and optionally kube-scheduler) built from Go modules by
``deploy/testcluster/build.sh``, kine on SQLite for storage, and KWOK standing in for kubelets: GPU
nodes are Node objects with the labels and capacity NVIDIA's device plugin and GPU Feature
Discovery publish, and bound pods go Running/Succeeded through KWOK stages. No GPU is touched and
the control plane listens on 127.0.0.1. Nothing runs in a container, except with ``--real-node``:
then one real node (a kubelet with containerd and runc, ``real_node``) runs the chart's controller
and agent as pods (``release``), beside the KWOK nodes.
"""
