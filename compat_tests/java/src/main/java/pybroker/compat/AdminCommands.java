package pybroker.compat;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;

/** The AdminClient commands; each prints exactly one JSON object. */
final class AdminCommands {
    private AdminCommands() {}

    static void run(String command, Args args) throws ExecutionException, InterruptedException {
        try (Admin admin = Admin.create(adminConfig(args))) {
            ObjectNode result = switch (command) {
                case "create-topic" -> createTopic(admin, args);
                case "delete-topic" -> deleteTopic(admin, args);
                case "list-topics" -> listTopics(admin, args);
                case "describe-topic" -> describeTopic(admin, args);
                case "describe-configs" -> describeConfigs(admin, args);
                case "alter-configs" -> alterConfigs(admin, args);
                case "create-partitions" -> createPartitions(admin, args);
                case "list-offsets" -> listOffsets(admin, args);
                case "delete-records" -> deleteRecords(admin, args);
                case "describe-cluster" -> describeCluster(admin);
                case "list-groups" -> GroupAdminCommands.listGroups(admin, args);
                case "describe-group" -> GroupAdminCommands.describeGroup(admin, args);
                case "delete-group" -> GroupAdminCommands.deleteGroup(admin, args);
                case "committed-offsets" -> GroupAdminCommands.committedOffsets(admin, args);
                default -> throw new UsageException("unknown admin command " + command);
            };
            Json.emit(result);
        }
    }

    private static java.util.Properties adminConfig(Args args) {
        java.util.Properties props = ClientConfig.base(args);
        ClientConfig.applyOverrides(props, args);
        return props;
    }

    private static ObjectNode createTopic(Admin admin, Args args) throws ExecutionException, InterruptedException {
        String topic = args.required("topic");
        NewTopic newTopic = new NewTopic(
                topic, Optional.of(args.optionalInt("partitions", 1)),
                Optional.of((short) args.optionalInt("replication-factor", 1)));
        newTopic.configs(args.keyValues("config"));
        CreateTopicsResult created = admin.createTopics(List.of(newTopic));
        created.all().get();
        ObjectNode out = Json.object();
        out.put("topic", topic);
        out.put("topic_id", created.topicId(topic).get().toString());
        out.put("partitions", created.numPartitions(topic).get());
        out.put("replication_factor", created.replicationFactor(topic).get());
        return out;
    }

    private static ObjectNode deleteTopic(Admin admin, Args args) throws ExecutionException, InterruptedException {
        String topic = args.required("topic");
        admin.deleteTopics(List.of(topic)).all().get();
        ObjectNode out = Json.object();
        out.put("topic", topic);
        out.put("deleted", true);
        return out;
    }

    private static ObjectNode listTopics(Admin admin, Args args) throws ExecutionException, InterruptedException {
        ListTopicsOptions options = new ListTopicsOptions().listInternal(args.optionalBool("internal", false));
        ObjectNode out = Json.object();
        ArrayNode names = out.putArray("topics");
        new TreeSet<>(admin.listTopics(options).names().get()).forEach(names::add);
        return out;
    }

    private static ObjectNode describeTopic(Admin admin, Args args) throws ExecutionException, InterruptedException {
        String topic = args.required("topic");
        TopicDescription description = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        ObjectNode out = Json.object();
        out.put("topic", description.name());
        out.put("topic_id", description.topicId().toString());
        out.put("internal", description.isInternal());
        ArrayNode partitions = out.putArray("partitions");
        for (TopicPartitionInfo info : description.partitions()) {
            ObjectNode partition = partitions.addObject();
            partition.put("partition", info.partition());
            if (info.leader() == null) {
                partition.putNull("leader");
            } else {
                partition.put("leader", info.leader().id());
            }
            partition.set("replicas", nodeIds(info.replicas()));
            partition.set("isr", nodeIds(info.isr()));
        }
        return out;
    }

    private static ObjectNode describeConfigs(Admin admin, Args args) throws ExecutionException, InterruptedException {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, args.required("topic"));
        Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
        ObjectNode out = Json.object();
        out.put("topic", resource.name());
        ObjectNode entries = out.putObject("configs");
        List<ConfigEntry> sorted = new ArrayList<>(config.entries());
        sorted.sort((a, b) -> a.name().compareTo(b.name()));
        for (ConfigEntry entry : sorted) {
            ObjectNode described = entries.putObject(entry.name());
            described.put("value", entry.value());
            described.put("source", entry.source().name());
            described.put("read_only", entry.isReadOnly());
            described.put("default", entry.source() == ConfigEntry.ConfigSource.DEFAULT_CONFIG);
            described.put("sensitive", entry.isSensitive());
        }
        return out;
    }

    private static ObjectNode alterConfigs(Admin admin, Args args) throws ExecutionException, InterruptedException {
        // --group G alters a group's configs (share.auto.offset.reset, ...); otherwise --topic T's.
        String group = args.optional("group", null);
        ConfigResource resource = group != null
                ? new ConfigResource(ConfigResource.Type.forId((byte) 32), group) // GROUP: not in the 3.9 enum
                : new ConfigResource(ConfigResource.Type.TOPIC, args.required("topic"));
        List<AlterConfigOp> ops = new ArrayList<>();
        args.keyValues("set").forEach((name, value) ->
                ops.add(new AlterConfigOp(new ConfigEntry(name, value), AlterConfigOp.OpType.SET)));
        for (String name : args.all("delete")) {
            ops.add(new AlterConfigOp(new ConfigEntry(name, null), AlterConfigOp.OpType.DELETE));
        }
        if (ops.isEmpty()) {
            throw new UsageException("alter-configs needs at least one --set k=v or --delete k");
        }
        admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get();
        ObjectNode out = Json.object();
        out.put("topic", resource.name());
        out.put("altered", ops.size());
        return out;
    }

    private static ObjectNode createPartitions(Admin admin, Args args) throws ExecutionException, InterruptedException {
        String topic = args.required("topic");
        int total = args.requiredInt("total");
        admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(total))).all().get();
        ObjectNode out = Json.object();
        out.put("topic", topic);
        out.put("partitions", total);
        return out;
    }

    private static ObjectNode listOffsets(Admin admin, Args args) throws ExecutionException, InterruptedException {
        TopicPartition partition = new TopicPartition(args.required("topic"), args.requiredInt("partition"));
        String spec = args.required("spec");
        OffsetSpec offsetSpec = switch (spec) {
            case "earliest" -> OffsetSpec.earliest();
            case "latest" -> OffsetSpec.latest();
            case "max-timestamp" -> OffsetSpec.maxTimestamp();
            default -> OffsetSpec.forTimestamp(parseTimestamp(spec));
        };
        ListOffsetsResultInfo info = admin.listOffsets(Map.of(partition, offsetSpec)).partitionResult(partition).get();
        ObjectNode out = Json.object();
        out.put("offset", info.offset());
        out.put("timestamp", info.timestamp());
        if (info.leaderEpoch().isPresent()) {
            out.put("leader_epoch", info.leaderEpoch().get());
        } else {
            out.putNull("leader_epoch");
        }
        return out;
    }

    private static ObjectNode deleteRecords(Admin admin, Args args) throws ExecutionException, InterruptedException {
        TopicPartition partition = new TopicPartition(args.required("topic"), args.requiredInt("partition"));
        long before = args.requiredLong("before");
        long lowWatermark = admin.deleteRecords(Map.of(partition, RecordsToDelete.beforeOffset(before)))
                .lowWatermarks().get(partition).get().lowWatermark();
        ObjectNode out = Json.object();
        out.put("low_watermark", lowWatermark);
        return out;
    }

    private static ObjectNode describeCluster(Admin admin) throws ExecutionException, InterruptedException {
        DescribeClusterResult cluster = admin.describeCluster();
        ObjectNode out = Json.object();
        out.put("cluster_id", cluster.clusterId().get());
        Node controller = cluster.controller().get();
        if (controller == null || controller.isEmpty()) {
            out.putNull("controller");
        } else {
            out.set("controller", nodeJson(controller));
        }
        ArrayNode nodes = out.putArray("nodes");
        List<Node> sorted = new ArrayList<>(cluster.nodes().get());
        sorted.sort((a, b) -> Integer.compare(a.id(), b.id()));
        sorted.forEach(node -> nodes.add(nodeJson(node)));
        return out;
    }

    private static ObjectNode nodeJson(Node node) {
        ObjectNode out = Json.object();
        out.put("id", node.id());
        out.put("host", node.host());
        out.put("port", node.port());
        out.put("rack", node.rack());
        return out;
    }

    private static ArrayNode nodeIds(Collection<Node> nodes) {
        ArrayNode ids = Json.array();
        nodes.forEach(node -> ids.add(node.id()));
        return ids;
    }

    private static long parseTimestamp(String spec) {
        try {
            return Long.parseLong(spec);
        } catch (NumberFormatException e) {
            throw new UsageException("--spec must be earliest, latest, max-timestamp or a timestamp, got " + spec);
        }
    }
}
