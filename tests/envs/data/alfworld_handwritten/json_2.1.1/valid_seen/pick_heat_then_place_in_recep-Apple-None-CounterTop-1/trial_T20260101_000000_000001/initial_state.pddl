
(define (problem plan_trial_T20260101_000000_000001)
(:domain alfred)
(:objects
agent1 - agent
Apple - object
        Mug - object
        Knife - object
AppleType - otype
        MugType - otype
        KnifeType - otype
CounterTopType - rtype
        CabinetType - rtype
        FridgeType - rtype
        MicrowaveType - rtype
        SinkBasinType - rtype


        Apple_bar__minus_00_dot_48_bar__plus_00_dot_97_bar__plus_01_dot_66 - object
        Mug_bar__plus_00_dot_21_bar__plus_00_dot_91_bar__minus_01_dot_12 - object
        Knife_bar__minus_01_dot_70_bar__plus_00_dot_79_bar__minus_00_dot_22 - object
        CounterTop_bar__plus_00_dot_69_bar__plus_00_dot_95_bar__minus_02_dot_48 - receptacle
        Cabinet_bar__minus_01_dot_55_bar__plus_00_dot_50_bar__plus_00_dot_38 - receptacle
        Fridge_bar__minus_00_dot_04_bar__plus_00_dot_00_bar__plus_02_dot_13 - receptacle
        Microwave_bar__minus_01_dot_32_bar__plus_01_dot_52_bar__minus_01_dot_04 - receptacle
        Sink_bar__minus_01_dot_99_bar__plus_00_dot_93_bar__minus_00_dot_34_bar_SinkBasin - receptacle
        loc_bar_3_bar__minus_7_bar_2_bar_30 - location
        loc_bar__minus_4_bar_2_bar_3_bar_30 - location
        loc_bar_0_bar_6_bar_0_bar_30 - location
        loc_bar__minus_4_bar__minus_4_bar_3_bar__minus_15 - location
        loc_bar__minus_6_bar__minus_1_bar_3_bar_45 - location
        loc_bar_1_bar_0_bar_1_bar_30 - location
        )


(:init


        (receptacleType CounterTop_bar__plus_00_dot_69_bar__plus_00_dot_95_bar__minus_02_dot_48 CounterTopType)
        (receptacleType Cabinet_bar__minus_01_dot_55_bar__plus_00_dot_50_bar__plus_00_dot_38 CabinetType)
        (receptacleType Fridge_bar__minus_00_dot_04_bar__plus_00_dot_00_bar__plus_02_dot_13 FridgeType)
        (receptacleType Microwave_bar__minus_01_dot_32_bar__plus_01_dot_52_bar__minus_01_dot_04 MicrowaveType)
        (receptacleType Sink_bar__minus_01_dot_99_bar__plus_00_dot_93_bar__minus_00_dot_34_bar_SinkBasin SinkBasinType)
        (objectType Apple_bar__minus_00_dot_48_bar__plus_00_dot_97_bar__plus_01_dot_66 AppleType)
        (objectType Mug_bar__plus_00_dot_21_bar__plus_00_dot_91_bar__minus_01_dot_12 MugType)
        (objectType Knife_bar__minus_01_dot_70_bar__plus_00_dot_79_bar__minus_00_dot_22 KnifeType)
        (canContain CounterTopType AppleType)
        (canContain CounterTopType MugType)
        (canContain CounterTopType KnifeType)
        (canContain CabinetType MugType)
        (canContain FridgeType AppleType)
        (canContain FridgeType MugType)
        (canContain MicrowaveType AppleType)
        (canContain MicrowaveType MugType)
        (canContain SinkBasinType AppleType)
        (canContain SinkBasinType MugType)
        (canContain SinkBasinType KnifeType)
        (pickupable Apple_bar__minus_00_dot_48_bar__plus_00_dot_97_bar__plus_01_dot_66)
        (pickupable Mug_bar__plus_00_dot_21_bar__plus_00_dot_91_bar__minus_01_dot_12)
        (pickupable Knife_bar__minus_01_dot_70_bar__plus_00_dot_79_bar__minus_00_dot_22)
        (isReceptacleObject Mug_bar__plus_00_dot_21_bar__plus_00_dot_91_bar__minus_01_dot_12)
        (openable Cabinet_bar__minus_01_dot_55_bar__plus_00_dot_50_bar__plus_00_dot_38)
        (openable Fridge_bar__minus_00_dot_04_bar__plus_00_dot_00_bar__plus_02_dot_13)
        (openable Microwave_bar__minus_01_dot_32_bar__plus_01_dot_52_bar__minus_01_dot_04)

        (atLocation agent1 loc_bar_1_bar_0_bar_1_bar_30)

        (heatable Apple_bar__minus_00_dot_48_bar__plus_00_dot_97_bar__plus_01_dot_66)
        (heatable Mug_bar__plus_00_dot_21_bar__plus_00_dot_91_bar__minus_01_dot_12)
        (coolable Apple_bar__minus_00_dot_48_bar__plus_00_dot_97_bar__plus_01_dot_66)
        (cleanable Knife_bar__minus_01_dot_70_bar__plus_00_dot_79_bar__minus_00_dot_22)

        (inReceptacle Apple_bar__minus_00_dot_48_bar__plus_00_dot_97_bar__plus_01_dot_66 Fridge_bar__minus_00_dot_04_bar__plus_00_dot_00_bar__plus_02_dot_13)
        (inReceptacle Mug_bar__plus_00_dot_21_bar__plus_00_dot_91_bar__minus_01_dot_12 CounterTop_bar__plus_00_dot_69_bar__plus_00_dot_95_bar__minus_02_dot_48)
        (inReceptacle Knife_bar__minus_01_dot_70_bar__plus_00_dot_79_bar__minus_00_dot_22 Cabinet_bar__minus_01_dot_55_bar__plus_00_dot_50_bar__plus_00_dot_38)


        (receptacleAtLocation CounterTop_bar__plus_00_dot_69_bar__plus_00_dot_95_bar__minus_02_dot_48 loc_bar_3_bar__minus_7_bar_2_bar_30)
        (receptacleAtLocation Cabinet_bar__minus_01_dot_55_bar__plus_00_dot_50_bar__plus_00_dot_38 loc_bar__minus_4_bar_2_bar_3_bar_30)
        (receptacleAtLocation Fridge_bar__minus_00_dot_04_bar__plus_00_dot_00_bar__plus_02_dot_13 loc_bar_0_bar_6_bar_0_bar_30)
        (receptacleAtLocation Microwave_bar__minus_01_dot_32_bar__plus_01_dot_52_bar__minus_01_dot_04 loc_bar__minus_4_bar__minus_4_bar_3_bar__minus_15)
        (receptacleAtLocation Sink_bar__minus_01_dot_99_bar__plus_00_dot_93_bar__minus_00_dot_34_bar_SinkBasin loc_bar__minus_6_bar__minus_1_bar_3_bar_45)
        (objectAtLocation Apple_bar__minus_00_dot_48_bar__plus_00_dot_97_bar__plus_01_dot_66 loc_bar_0_bar_6_bar_0_bar_30)
        (objectAtLocation Mug_bar__plus_00_dot_21_bar__plus_00_dot_91_bar__minus_01_dot_12 loc_bar_3_bar__minus_7_bar_2_bar_30)
        (objectAtLocation Knife_bar__minus_01_dot_70_bar__plus_00_dot_79_bar__minus_00_dot_22 loc_bar__minus_4_bar_2_bar_3_bar_30)
        )


        (:goal
            (and
                (exists (?r - receptacle)
                    (exists (?o - object)
                        (and
                            (heatable ?o)
                            (objectType ?o AppleType)
                            (receptacleType ?r CounterTopType)
                            (isHot ?o)
                            (inReceptacle ?o ?r)
                        )
                    )
                )
            )
        )
    )
