"""What a batch's partitions and its commit share below the commit: the Arrow packing, the windows' players' port."""
