"""Dynamic Resource Allocation: the resource.k8s.io objects, CEL selectors, ResourceSlices and the allocator."""
