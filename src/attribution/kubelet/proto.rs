//! The messages of the kubelet's pod-resources API (`k8s.io/kubelet/pkg/apis/podresources/v1`,
//! `../shared/data/kubelet-podresources/api.proto`, Apache-2.0), written from the proto's
//! field numbers: only what `List` needs. Fields gpuwatch does not read (CPU ids, memory,
//! topology, dynamic resources) are left out; protobuf skips unknown fields, so a kubelet
//! that sends them is read correctly.

/// The `List` RPC's path.
pub const LIST_PATH: &str = "/v1.PodResourcesLister/List";

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub namespace: String,
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerDevices {
    #[prost(string, tag = "1")]
    pub resource_name: String,
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
}
