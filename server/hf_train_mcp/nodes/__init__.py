"""What a run across machines is: flavors, ranks, rendezvous, the memory each machine must hold."""
