package main

// The pod statuses the node agent writes, shaped as a kubelet writes them.

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func conditions(now metav1.Time, ready corev1.ConditionStatus, reason string) []corev1.PodCondition {
	condition := func(t corev1.PodConditionType, s corev1.ConditionStatus, reason string) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: now}
	}
	return []corev1.PodCondition{
		condition(corev1.PodReadyToStartContainers, corev1.ConditionTrue, ""),
		condition(corev1.PodInitialized, corev1.ConditionTrue, ""),
		condition(corev1.ContainersReady, ready, reason),
		condition(corev1.PodReady, ready, reason),
		condition(corev1.PodScheduled, corev1.ConditionTrue, ""),
	}
}

func containerID(pod *corev1.Pod, name string) string {
	return fmt.Sprintf("fake://%s/%s", pod.UID, name)
}

// baseStatus keeps what the server set and fills in the node's part.
func baseStatus(pod *corev1.Pod, now metav1.Time) corev1.PodStatus {
	status := *pod.Status.DeepCopy()
	status.HostIP = "127.0.0.1"
	status.HostIPs = []corev1.HostIP{{IP: "127.0.0.1"}}
	if status.StartTime == nil {
		status.StartTime = &now
	}
	return status
}

// runningStatus: every init container done, every container running and ready.
func runningStatus(pod *corev1.Pod, ip string) corev1.PodStatus {
	now := metav1.Now()
	status := baseStatus(pod, now)
	status.Phase = corev1.PodRunning
	status.PodIP = ip
	status.PodIPs = []corev1.PodIP{{IP: ip}}
	status.Conditions = conditions(now, corev1.ConditionTrue, "")
	status.InitContainerStatuses = nil
	for _, c := range pod.Spec.InitContainers {
		status.InitContainerStatuses = append(status.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: containerID(pod, c.Name), Ready: true,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now, ContainerID: containerID(pod, c.Name),
			}},
		})
	}
	started := true
	status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		status.ContainerStatuses = append(status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: containerID(pod, c.Name),
			Ready: true, Started: &started,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return status
}

// pullFailedStatus: Pending, every container waiting on the pull of image.
func pullFailedStatus(pod *corev1.Pod, reason, image string) corev1.PodStatus {
	now := metav1.Now()
	status := baseStatus(pod, now)
	status.Phase = corev1.PodPending
	status.Conditions = conditions(now, corev1.ConditionFalse, "ContainersNotReady")
	message := fmt.Sprintf("Failed to pull image %q: not found (kube-system/%s)", image, pullFailuresConfigMap)
	if reason == "ImagePullBackOff" {
		message = fmt.Sprintf("Back-off pulling image %q", image)
	}
	started := false
	status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		status.ContainerStatuses = append(status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Started: &started,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}},
		})
	}
	return status
}

// statusUnchanged: the pull failure already shows this reason, so no write (keeps the
// transition times, and the server, quiet).
func statusUnchanged(pod *corev1.Pod, status corev1.PodStatus) bool {
	if len(pod.Status.ContainerStatuses) != len(status.ContainerStatuses) {
		return false
	}
	for i, c := range pod.Status.ContainerStatuses {
		if !equality.Semantic.DeepEqual(c.State, status.ContainerStatuses[i].State) {
			return false
		}
	}
	return true
}

// finishedStatus: the pod's containers exited with exitCode; Succeeded when it is 0.
func finishedStatus(pod *corev1.Pod, exitCode int32) corev1.PodStatus {
	now := metav1.Now()
	status := baseStatus(pod, now)
	status.Phase = corev1.PodSucceeded
	reason := "Completed"
	if exitCode != 0 {
		status.Phase = corev1.PodFailed
		reason = "Error"
	}
	status.Conditions = conditions(now, corev1.ConditionFalse, "PodCompleted")
	started := false
	status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		startedAt := now
		if status.StartTime != nil {
			startedAt = *status.StartTime
		}
		status.ContainerStatuses = append(status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: containerID(pod, c.Name), Started: &started,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: exitCode, Reason: reason, StartedAt: startedAt, FinishedAt: now,
				ContainerID: containerID(pod, c.Name),
			}},
		})
	}
	return status
}
