package main

// The node agent: the part of a kubelet the tests need, in-process. It registers one Ready Node
// (and clears the not-ready taint that admission puts on every new Node, which only the node
// lifecycle controller, not run here, would remove), binds every pod that has no node to it,
// starts pods (Running, Ready, container statuses), ends Job pods, fails image pulls on request
// and confirms deletions. What a test can ask of it is in README.md beside this file.

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

const (
	nodeName = "control-plane-node"
	// pullFailuresConfigMap (namespace kube-system) key pull-failures: one image prefix a line;
	// a new pod with a container image starting with one of them never pulls.
	pullFailuresConfigMap = "fake-kubelet"
	pullFailuresKey       = "pull-failures"
	// exitCodeAnnotation on a Job or its pod template: the exit code its pods end with ("0",
	// the default, succeeds; anything else fails the pod).
	exitCodeAnnotation = "fake-kubelet.builder-monitor.test/exit-code"
	// runForAnnotation on a Job or its pod template: how long its pods run before they end, a Go
	// duration ("1s" by default), or "forever".
	runForAnnotation = "fake-kubelet.builder-monitor.test/run-for"
	// backOffAfter is how long a pod shows ErrImagePull before ImagePullBackOff.
	backOffAfter = time.Second
)

type nodeAgent struct {
	client  kubernetes.Interface
	pods    corelisters.PodLister
	jobs    batchlisters.JobLister
	configs corelisters.ConfigMapLister
	queue   workqueue.TypedRateLimitingInterface[string]
	lastIP  atomic.Uint32
}

// runNodeAgent registers the Node and serves its pods until ctx ends.
func runNodeAgent(ctx context.Context, client kubernetes.Interface) error {
	if err := registerNode(ctx, client); err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	kubeSystem := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(metav1.NamespaceSystem),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", pullFailuresConfigMap).String()
		}))
	agent := &nodeAgent{
		client:  client,
		pods:    factory.Core().V1().Pods().Lister(),
		jobs:    factory.Batch().V1().Jobs().Lister(),
		configs: kubeSystem.Core().V1().ConfigMaps().Lister(),
		queue: workqueue.NewTypedRateLimitingQueue(
			workqueue.DefaultTypedControllerRateLimiter[string]()),
	}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			agent.queue.Add(key)
		}
	}
	_, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	kubeSystem.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	kubeSystem.WaitForCacheSync(ctx.Done())
	go func() {
		<-ctx.Done()
		agent.queue.ShutDown()
	}()
	for range 2 {
		go agent.work(ctx)
	}
	return nil
}

func (a *nodeAgent) work(ctx context.Context) {
	for {
		key, shutdown := a.queue.Get()
		if shutdown {
			return
		}
		if err := a.sync(ctx, key); err != nil {
			if ctx.Err() == nil {
				klog.V(2).InfoS("node agent: retrying", "pod", key, "err", err)
			}
			a.queue.AddRateLimited(key)
		} else {
			a.queue.Forget(key)
		}
		a.queue.Done(key)
	}
}

// sync moves one pod one step along what a kubelet would do with it.
func (a *nodeAgent) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := a.pods.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	pods := a.client.CoreV1().Pods(namespace)
	switch {
	case pod.DeletionTimestamp != nil:
		if pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0 {
			return nil // confirmed; what is left waits on finalizers
		}
		grace, uid := int64(0), pod.UID
		err := pods.Delete(ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	case pod.Spec.NodeName == "":
		if len(pod.Spec.SchedulingGates) > 0 {
			return nil
		}
		err := pods.Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: nodeName},
		}, metav1.CreateOptions{})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	case pod.Spec.NodeName != nodeName:
		return nil
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return nil
	case pod.Status.Phase == corev1.PodRunning:
		return a.finishJobPod(ctx, pod)
	default:
		return a.startPod(ctx, pod)
	}
}

// startPod runs a bound pod, or fails its image pull when a container's image is one the
// ConfigMap kube-system/fake-kubelet names.
func (a *nodeAgent) startPod(ctx context.Context, pod *corev1.Pod) error {
	if failing := a.failingImage(pod); failing != "" {
		reason := "ErrImagePull"
		if since := pod.Status.StartTime; since != nil && time.Since(since.Time) >= backOffAfter {
			reason = "ImagePullBackOff"
		}
		// Back again to turn ErrImagePull into ImagePullBackOff, and to retry the pull as a
		// kubelet does, so that a test can lift the failure.
		a.queue.AddAfter(cache.MetaObjectToName(pod).String(), backOffAfter)
		status := pullFailedStatus(pod, reason, failing)
		if statusUnchanged(pod, status) {
			return nil
		}
		return a.writeStatus(ctx, pod, status)
	}
	ip := a.lastIP.Add(1)
	status := runningStatus(pod, fmt.Sprintf("10.244.%d.%d", (ip>>8)&0xff, ip&0xff))
	return a.writeStatus(ctx, pod, status)
}

// finishJobPod ends a running pod of a Job once it has run for as long as asked.
func (a *nodeAgent) finishJobPod(ctx context.Context, pod *corev1.Pod) error {
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "Job" {
		return nil
	}
	annotations := map[string]string{}
	if job, err := a.jobs.Jobs(pod.Namespace).Get(owner.Name); err == nil {
		for k, v := range job.Annotations {
			annotations[k] = v
		}
	}
	for k, v := range pod.Annotations {
		annotations[k] = v
	}
	runFor := time.Second
	if text, ok := annotations[runForAnnotation]; ok {
		if text == "forever" {
			return nil
		}
		parsed, err := time.ParseDuration(text)
		if err != nil {
			klog.InfoS("node agent: unreadable annotation, using 1s", "annotation", runForAnnotation, "value", text)
		} else {
			runFor = parsed
		}
	}
	started := pod.CreationTimestamp.Time
	if pod.Status.StartTime != nil {
		started = pod.Status.StartTime.Time
	}
	if left := time.Until(started.Add(runFor)); left > 0 {
		a.queue.AddAfter(cache.MetaObjectToName(pod).String(), left)
		return nil
	}
	exitCode := int32(0)
	if text, ok := annotations[exitCodeAnnotation]; ok {
		if _, err := fmt.Sscanf(text, "%d", &exitCode); err != nil {
			klog.InfoS("node agent: unreadable annotation, failing with 1", "annotation", exitCodeAnnotation, "value", text)
			exitCode = 1
		}
	}
	return a.writeStatus(ctx, pod, finishedStatus(pod, exitCode))
}

// failingImage is the first container image that starts with a line of the ConfigMap.
func (a *nodeAgent) failingImage(pod *corev1.Pod) string {
	config, err := a.configs.ConfigMaps(metav1.NamespaceSystem).Get(pullFailuresConfigMap)
	if err != nil {
		return ""
	}
	for _, prefix := range strings.Split(config.Data[pullFailuresKey], "\n") {
		prefix = strings.TrimSpace(prefix)
		if prefix == "" {
			continue
		}
		for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
			if strings.HasPrefix(c.Image, prefix) {
				return c.Image
			}
		}
	}
	return ""
}

func (a *nodeAgent) writeStatus(ctx context.Context, pod *corev1.Pod, status corev1.PodStatus) error {
	updated := pod.DeepCopy()
	updated.Status = status
	_, err := a.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// registerNode creates the Node, reports it Ready with room for pods, and clears its taints.
func registerNode(ctx context.Context, client kubernetes.Interface) error {
	nodes := client.CoreV1().Nodes()
	_, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: nodeName,
		Labels: map[string]string{
			"kubernetes.io/hostname": nodeName, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		},
	}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Node: %w", err)
	}
	resources := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("16"),
		corev1.ResourceMemory:           resource.MustParse("64Gi"),
		corev1.ResourcePods:             resource.MustParse("250"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		condition := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
			return corev1.NodeCondition{Type: t, Status: s, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
		}
		node.Status = corev1.NodeStatus{
			Capacity:    resources,
			Allocatable: resources,
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{
				condition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
				condition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
				condition(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
				condition(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
			},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: nodeName},
			},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion: "v1.37.2", OperatingSystem: "linux", Architecture: "amd64",
				ContainerRuntimeVersion: "fake://1.0",
			},
		}
		node, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		node.Spec.Taints = nil
		_, err = nodes.Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
}
