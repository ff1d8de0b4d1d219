package pybroker.compat;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.ListConsumerGroupsOptions;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.ConsumerGroupState;
import org.apache.kafka.common.TopicPartition;

/** Consumer-group admin commands: ListGroups, DescribeGroups, DeleteGroups, OffsetFetch. */
final class GroupAdminCommands {
    private GroupAdminCommands() {}

    /** {@code list-groups [--state S ...]} -> {"groups": {group id: STATE}}. */
    static ObjectNode listGroups(Admin admin, Args args) throws ExecutionException, InterruptedException {
        ListConsumerGroupsOptions options = new ListConsumerGroupsOptions();
        List<String> states = args.all("state");
        if (!states.isEmpty()) {
            Set<ConsumerGroupState> wanted = states.stream()
                    .map(ConsumerGroupState::parse)
                    .collect(Collectors.toSet());
            options.inStates(wanted);
        }
        Map<String, String> groups = new TreeMap<>();
        for (ConsumerGroupListing listing : admin.listConsumerGroups(options).all().get()) {
            groups.put(listing.groupId(), listing.state().map(GroupAdminCommands::stateName).orElse("UNKNOWN"));
        }
        ObjectNode result = Json.object();
        ObjectNode out = result.putObject("groups");
        groups.forEach(out::put);
        return result;
    }

    /** {@code describe-group --group G} -> {"group", "state", "protocol", "coordinator", "members": [...]}. */
    static ObjectNode describeGroup(Admin admin, Args args) throws ExecutionException, InterruptedException {
        String group = args.required("group");
        ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get();
        ObjectNode result = Json.object();
        result.put("group", d.groupId());
        result.put("state", stateName(d.state()));
        result.put("protocol", d.partitionAssignor());
        result.put("type", d.type().name()); // CONSUMER (KIP-848) or CLASSIC
        result.put("simple", d.isSimpleConsumerGroup());
        result.put("coordinator", d.coordinator() == null ? -1 : d.coordinator().id());
        ArrayNode members = result.putArray("members");
        List<MemberDescription> sorted = new ArrayList<>(d.members());
        sorted.sort(Comparator.comparing(MemberDescription::consumerId));
        for (MemberDescription m : sorted) {
            ObjectNode member = members.addObject();
            member.put("member_id", m.consumerId());
            member.put("client_id", m.clientId());
            member.put("host", m.host());
            member.put("instance_id", m.groupInstanceId().orElse(null));
            ArrayNode partitions = member.putArray("partitions");
            m.assignment().topicPartitions().stream()
                    .sorted(Comparator.comparing(TopicPartition::topic).thenComparingInt(TopicPartition::partition))
                    .forEach(tp -> partitions.addArray().add(tp.topic()).add(tp.partition()));
        }
        return result;
    }

    /** {@code delete-group --group G} -> {"group", "deleted": true}. */
    static ObjectNode deleteGroup(Admin admin, Args args) throws ExecutionException, InterruptedException {
        String group = args.required("group");
        admin.deleteConsumerGroups(List.of(group)).all().get();
        return Json.object().put("group", group).put("deleted", true);
    }

    /** {@code committed-offsets --group G} -> {"group", "offsets": [{"topic", "partition", "offset", "metadata"}]}. */
    static ObjectNode committedOffsets(Admin admin, Args args) throws ExecutionException, InterruptedException {
        String group = args.required("group");
        Map<TopicPartition, OffsetAndMetadata> offsets =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
        ObjectNode result = Json.object().put("group", group);
        ArrayNode out = result.putArray("offsets");
        offsets.entrySet().stream()
                .filter(e -> e.getValue() != null)
                .sorted(Map.Entry.comparingByKey(
                        Comparator.comparing(TopicPartition::topic).thenComparingInt(TopicPartition::partition)))
                .forEach(e -> out.addObject()
                        .put("topic", e.getKey().topic())
                        .put("partition", e.getKey().partition())
                        .put("offset", e.getValue().offset())
                        .put("metadata", e.getValue().metadata()));
        return result;
    }

    private static String stateName(ConsumerGroupState state) {
        return state.name();
    }
}
